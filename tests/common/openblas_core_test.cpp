// Which OpenBLAS kernels the launcher asks for (common/openblas_core.h): only
// a pre-AVX fallback on a CPU with AVX2 or more is overruled, and the core it
// names is the widest the CPU's flags allow.
#include <gtest/gtest.h>

#include <cstdlib>

#include "common/cpu_info.h"
#include "common/openblas_core.h"

namespace accelerate::detail {
namespace {

const std::vector<std::string> kAvx512 = {"avx",      "avx2",     "fma",      "avx512f",
                                          "avx512cd", "avx512bw", "avx512dq", "avx512vl"};

std::vector<std::string> with(std::vector<std::string> flags, const std::string& more) {
  flags.push_back(more);
  return flags;
}

TEST(OpenblasCore, TheWidestCoreTheFlagsAllow) {
  EXPECT_EQ(openblas_core_for_cpu(with(kAvx512, "avx512_bf16")), "Cooperlake");
  EXPECT_EQ(openblas_core_for_cpu(kAvx512), "SkylakeX");
  // AVX-512 without VL (Knights Landing) is not SkylakeX's instruction set.
  EXPECT_EQ(openblas_core_for_cpu({"avx", "avx2", "fma", "avx512f", "avx512cd"}), "Haswell");
  EXPECT_EQ(openblas_core_for_cpu({"avx", "avx2", "fma"}), "Haswell");
  EXPECT_FALSE(openblas_core_for_cpu({"avx", "avx2"}).has_value());  // no FMA
  EXPECT_FALSE(openblas_core_for_cpu({"sse3", "avx"}).has_value());
}

TEST(OpenblasCore, OnlyAPreAvxFallbackIsOverruled) {
  const auto cpu = with(kAvx512, "avx512_bf16");
  EXPECT_EQ(faster_openblas_core("Prescott", cpu), "Cooperlake");
  EXPECT_EQ(faster_openblas_core("prescott", cpu), "Cooperlake");
  EXPECT_EQ(faster_openblas_core("Nehalem", {"avx", "avx2", "fma"}), "Haswell");
  // OpenBLAS's own choices stay, also a narrower one than the flags allow.
  for (const char* chosen : {"Haswell", "SkylakeX", "Zen", "Cooperlake", "SapphireRapids"}) {
    EXPECT_FALSE(faster_openblas_core(chosen, cpu).has_value()) << chosen;
  }
  // A CPU without AVX2 keeps the generic kernels.
  EXPECT_FALSE(faster_openblas_core("Prescott", {"sse3", "avx"}).has_value());
}

TEST(OpenblasCore, TheNoteSaysWhatToExportUnlessItIsSet) {
  const auto cpu = with(kAvx512, "avx512_bf16");
  const auto note = openblas_core_note(std::string("Prescott"), cpu, {});
  ASSERT_TRUE(note.has_value());
  EXPECT_NE(note->find("OPENBLAS_CORETYPE=Cooperlake"), std::string::npos) << *note;
  EXPECT_NE(note->find("Prescott"), std::string::npos) << *note;
  EXPECT_EQ(note->find('\n'), std::string::npos);
  EXPECT_FALSE(openblas_core_note(std::string("Prescott"), cpu, {{"OPENBLAS_CORETYPE", "Haswell"}})
                   .has_value());
  EXPECT_FALSE(openblas_core_note(std::nullopt, cpu, {}).has_value());  // no OpenBLAS
  EXPECT_FALSE(openblas_core_note(std::string("SkylakeX"), cpu, {}).has_value());
}

TEST(OpenblasCore, CpuInfoFlagsAreTheFirstProcessors) {
  const CpuInfo cpu = parse_cpuinfo(
      "processor\t: 0\nmodel name\t: A\nflags\t\t: fpu avx2 fma\n\nprocessor\t: 1\nflags\t: fpu\n");
  EXPECT_EQ(cpu.flags, (std::vector<std::string>{"fpu", "avx2", "fma"}));
  EXPECT_EQ(cpu.logical_cpus, 2);
}

// The system's OpenBLAS, asked for real: it reads OPENBLAS_CORETYPE each
// time it loads, and the question unloads it again.
TEST(OpenblasCore, TheSystemLibraryNamesTheCoreItLoadedWith) {
  if (!openblas_core_of_system_library()) GTEST_SKIP() << "no libopenblas.so.0 on this machine";
  const auto flags = parse_cpuinfo(read_cpuinfo()).flags;
  if (!openblas_core_for_cpu(flags)) GTEST_SKIP() << "this CPU has no AVX2";
  ASSERT_EQ(setenv("OPENBLAS_CORETYPE", "Haswell", 1), 0);
  const auto forced = openblas_core_of_system_library();
  unsetenv("OPENBLAS_CORETYPE");
  EXPECT_EQ(forced, "Haswell");
}

}  // namespace
}  // namespace accelerate::detail
