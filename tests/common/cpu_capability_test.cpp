// Which instruction set the library's kernels run (common/cpu_capability.h),
// from the /proc/cpuinfo flags of real CPU kinds and ACCELERATE_CPU_CAPABILITY.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "accelerate/common/errors.h"
#include "common/cpu_capability.h"
#include "common/cpu_info.h"

namespace accelerate::detail {
namespace {

const std::vector<std::string> kLevel3Flags = {"sse2", "avx", "avx2", "bmi1",  "bmi2",
                                               "f16c", "fma", "abm",  "movbe", "xsave"};

std::vector<std::string> plus_flags(std::vector<std::string> flags, std::vector<std::string> more) {
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

// An AMD EPYC of Zen 2/3 (LUMI's CPU partition): AVX2, no AVX-512.
const std::vector<std::string> kAvx2Epyc = plus_flags(kLevel3Flags, {"sha_ni", "clzero"});
// A Skylake-SP Xeon: the five AVX-512 sets of x86-64-v4.
const std::vector<std::string> kAvx512Xeon =
    plus_flags(kLevel3Flags, {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"});
// An old Sandy Bridge: AVX without AVX2.
const std::vector<std::string> kAvxOnlySandyBridge = {"sse2", "sse4_2", "avx", "xsave"};
const std::vector<std::string> kArmGraviton3 = {"fp", "asimd", "sve", "bf16"};

TEST(CpuCapability, NamesAreAtensAndParseExactly) {
  for (CpuCapability capability : kAllCpuCapabilities) {
    EXPECT_EQ(parse_cpu_capability(to_string(capability)), capability);
  }
  EXPECT_STREQ(to_string(CpuCapability::kAvx2), "avx2");
  EXPECT_FALSE(parse_cpu_capability("AVX2").has_value());
  EXPECT_FALSE(parse_cpu_capability("avx512_bf16").has_value());
  EXPECT_FALSE(parse_cpu_capability("").has_value());
}

TEST(CpuCapability, TheHighestIsTheLevelWhoseFlagsAreAllThere) {
  EXPECT_EQ(highest_cpu_capability(kAvx512Xeon), CpuCapability::kAvx512);
  EXPECT_EQ(highest_cpu_capability(kAvx2Epyc), CpuCapability::kAvx2);
  EXPECT_EQ(highest_cpu_capability(kAvxOnlySandyBridge), CpuCapability::kDefault);
  EXPECT_EQ(highest_cpu_capability(kArmGraviton3), CpuCapability::kDefault);
  EXPECT_EQ(highest_cpu_capability({}), CpuCapability::kDefault);
  // AVX-512 flags without all of v3 (a hypervisor that hides BMI2) are not v4.
  std::vector<std::string> no_bmi2 = kAvx512Xeon;
  no_bmi2.erase(std::find(no_bmi2.begin(), no_bmi2.end(), "bmi2"));
  EXPECT_EQ(highest_cpu_capability(no_bmi2), CpuCapability::kDefault);
  // One of the five AVX-512 sets missing (Knights Landing has no BW/DQ/VL).
  std::vector<std::string> no_vl = kAvx512Xeon;
  no_vl.pop_back();
  EXPECT_EQ(highest_cpu_capability(no_vl), CpuCapability::kAvx2);
}

TEST(CpuCapability, UnsetTakesTheHighestAndACapAtOrBelowIsKept) {
  EXPECT_EQ(resolve_cpu_capability({}, kAvx512Xeon), CpuCapability::kAvx512);
  EXPECT_EQ(resolve_cpu_capability({{"ACCELERATE_CPU_CAPABILITY", ""}}, kAvx2Epyc),
            CpuCapability::kAvx2);
  for (CpuCapability capability : kAllCpuCapabilities) {
    EXPECT_EQ(
        resolve_cpu_capability({{"ACCELERATE_CPU_CAPABILITY", to_string(capability)}}, kAvx512Xeon),
        capability);
  }
  EXPECT_EQ(resolve_cpu_capability({{"ACCELERATE_CPU_CAPABILITY", "default"}}, kArmGraviton3),
            CpuCapability::kDefault);
}

std::string capability_error(const Environment& env, const std::vector<std::string>& flags) {
  try {
    resolve_cpu_capability(env, flags);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(CpuCapability, AnUnknownValueListsTheValues) {
  const std::string message =
      capability_error({{"ACCELERATE_CPU_CAPABILITY", "avx9"}}, kAvx512Xeon);
  EXPECT_EQ(message, "ACCELERATE_CPU_CAPABILITY expects one of default, avx2, avx512, got 'avx9'");
}

TEST(CpuCapability, ACapAboveThisCpuNamesTheMissingFlag) {
  EXPECT_EQ(capability_error({{"ACCELERATE_CPU_CAPABILITY", "avx512"}}, kAvx2Epyc),
            "ACCELERATE_CPU_CAPABILITY=avx512 asks for instructions this CPU lacks: its flags "
            "have no avx512f (the highest here is avx2)");
  const std::string old =
      capability_error({{"ACCELERATE_CPU_CAPABILITY", "avx2"}}, kAvxOnlySandyBridge);
  EXPECT_NE(old.find("have no avx2 (the highest here is default)"), std::string::npos) << old;
  EXPECT_EQ(old.find('\n'), std::string::npos);
}

// This process: the cap CTest gives the binary (it runs under each), or the
// highest this machine has.
TEST(CpuCapability, TheProcessRunsItsCapOrTheHighestHere) {
  const auto cap = lookup(current_environment(), "ACCELERATE_CPU_CAPABILITY");
  const CpuCapability expected = cap ? parse_cpu_capability(*cap).value()
                                     : highest_cpu_capability(parse_cpuinfo(read_cpuinfo()).flags);
  EXPECT_EQ(kernel_capability(), expected) << "cap " << cap.value_or("(none)");
}

}  // namespace
}  // namespace accelerate::detail
