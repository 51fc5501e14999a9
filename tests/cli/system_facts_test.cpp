// The machine facts `accelerate env` reports, from files written by the test.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "cli/cli_test_support.h"
#include "cli/system_facts.h"

namespace accelerate::cli {
namespace {

using testing::TemporaryFolder;
using testing::write_file;

TEST(SystemFacts, OsNameFromOsRelease) {
  EXPECT_EQ(
      os_pretty_name("NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"),
      "Debian GNU/Linux 12 (bookworm)");
  EXPECT_EQ(os_pretty_name("NAME=Alpine\nVERSION='3.19'\n"), "Alpine 3.19");
  EXPECT_FALSE(os_pretty_name("").has_value());
}

TEST(SystemFacts, CpuInfoCountsProcessorsAndKeepsTheFirstFlags) {
  const std::string cpuinfo =
      "processor\t: 0\nmodel name\t: Test CPU @ 2.00GHz\nflags\t\t: fpu avx avx2 avx512f "
      "avx512_bf16 "
      "amx_bf16 amx_tile\n\n"
      "processor\t: 1\nmodel name\t: Test CPU @ 2.00GHz\nflags\t\t: fpu\n";
  const CpuInfo cpu = parse_cpuinfo(cpuinfo);
  EXPECT_EQ(cpu.model, "Test CPU @ 2.00GHz");
  EXPECT_EQ(cpu.logical_cpus, 2);
  EXPECT_EQ(
      notable_cpu_flags(cpu.flags),
      (std::vector<std::string>{"avx", "avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}));
}

TEST(SystemFacts, MemTotalInBytes) {
  EXPECT_EQ(total_memory_bytes("MemTotal:       16384 kB\nMemFree: 1 kB\n"), 16384ULL * 1024);
  EXPECT_FALSE(total_memory_bytes("MemFree: 1 kB\n").has_value());
}

TEST(SystemFacts, GpusFromTheDriverDirectoryWhenNvidiaSmiIsAbsent) {
  TemporaryFolder folder;
  const std::string gpus = folder.path() + "/gpus";
  ::mkdir(gpus.c_str(), 0755);
  ::mkdir((gpus + "/0000:01:00.0").c_str(), 0755);
  write_file(gpus + "/0000:01:00.0/information", "Model: \t\t NVIDIA Test GPU\nIRQ: 1\n");
  EXPECT_EQ(list_gpus(folder.path(), gpus),
            (std::vector<std::string>{"GPU 0: NVIDIA Test GPU (0000:01:00.0)"}));
  EXPECT_TRUE(list_gpus(folder.path(), folder.path() + "/none").empty());
}

TEST(SystemFacts, GpusFromNvidiaSmiOnPath) {
  TemporaryFolder folder;
  write_file(folder.path() + "/nvidia-smi",
             "#!/bin/sh\n[ \"$1\" = -L ] && echo 'GPU 0: Fake H100 (UUID: GPU-1234)'\n", true);
  EXPECT_EQ(list_gpus(folder.path(), folder.path() + "/none"),
            (std::vector<std::string>{"GPU 0: Fake H100 (UUID: GPU-1234)"}));
}

// A kfd topology with a CPU node and three GPU nodes, numbered past 9 so the
// order must be numeric; one node's name file says what newer kernels write.
std::string make_kfd_nodes(const std::string& root) {
  const std::string nodes = root + "/nodes";
  ::mkdir(nodes.c_str(), 0755);
  struct Node {
    int number;
    int simd_count;
    int gfx_target_version;
    const char* name;
  };
  for (const Node& node : {Node{0, 0, 0, "AMD EPYC"}, Node{10, 304, 90402, "ip discovery"},
                           Node{2, 440, 90010, "aldebaran"}, Node{1, 440, 90010, nullptr}}) {
    const std::string folder = nodes + "/" + std::to_string(node.number);
    ::mkdir(folder.c_str(), 0755);
    write_file(folder + "/properties",
               "cpu_cores_count 0\nsimd_count " + std::to_string(node.simd_count) +
                   "\ngfx_target_version " + std::to_string(node.gfx_target_version) + "\n");
    write_file(folder + "/gpu_id", node.simd_count ? "51234\n" : "0\n");
    if (node.name) write_file(folder + "/name", std::string(node.name) + "\n");
  }
  return nodes;
}

TEST(SystemFacts, AmdGpusFromTheKfdTopology) {
  TemporaryFolder folder;
  const std::string nodes = make_kfd_nodes(folder.path());
  EXPECT_EQ(list_gpus(folder.path(), folder.path() + "/none", nodes),
            (std::vector<std::string>{"GPU 0: AMD GPU gfx90a (kfd node 1)",
                                      "GPU 1: AMD GPU gfx90a (name aldebaran, kfd node 2)",
                                      "GPU 2: AMD GPU gfx942 (name ip discovery, kfd node 10)"}));
  EXPECT_TRUE(list_gpus(folder.path(), folder.path() + "/none", folder.path() + "/no-kfd").empty());
}

TEST(SystemFacts, NvidiaGpusComeBeforeAmdGpus) {
  TemporaryFolder folder;
  const std::string gpus = folder.path() + "/gpus";
  ::mkdir(gpus.c_str(), 0755);
  ::mkdir((gpus + "/0000:01:00.0").c_str(), 0755);
  write_file(gpus + "/0000:01:00.0/information", "Model: \t\t NVIDIA Test GPU\n");
  const auto lines = list_gpus(folder.path(), gpus, make_kfd_nodes(folder.path()));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "GPU 0: NVIDIA Test GPU (0000:01:00.0)");
  EXPECT_EQ(lines[1], "GPU 0: AMD GPU gfx90a (kfd node 1)");
}

}  // namespace
}  // namespace accelerate::cli
