// Which CPUs compute bf16 in hardware (common/bf16_hardware.h), from the
// /proc/cpuinfo flags of real CPU kinds.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/bf16_hardware.h"

namespace accelerate::detail {
namespace {

const std::vector<std::string> kEpycZen3 = {"fpu", "sse2", "avx", "avx2", "fma", "sha_ni"};
const std::vector<std::string> kSkylakeX = {"sse2", "avx2", "avx512f", "avx512bw", "avx512vl"};
const std::vector<std::string> kSapphireRapids = {"sse2",        "avx2",     "avx512f",
                                                  "avx512_bf16", "amx_bf16", "amx_tile"};
const std::vector<std::string> kGraviton2 = {"fp", "asimd", "crc32", "atomics"};
const std::vector<std::string> kGraviton3 = {"fp", "asimd", "sve", "bf16", "i8mm"};

TEST(Bf16Hardware, NamesTheInstructionsACpuHas) {
  EXPECT_EQ(bf16_instructions(kSapphireRapids),
            (std::vector<std::string>{"avx512_bf16", "amx_bf16"}));
  EXPECT_EQ(bf16_instructions(kGraviton3), std::vector<std::string>{"bf16"});
  EXPECT_TRUE(bf16_instructions(kEpycZen3).empty());
  EXPECT_TRUE(bf16_instructions(kSkylakeX).empty()) << "AVX-512 alone has no bf16";
}

TEST(Bf16Hardware, NotesEmulationOnlyWhereTheInstructionsAreMissing) {
  const auto epyc = bf16_emulation_note(kEpycZen3);
  ASSERT_TRUE(epyc.has_value());
  EXPECT_NE(epyc->find("no avx512_bf16 or amx_bf16"), std::string::npos) << *epyc;
  EXPECT_NE(epyc->find("slower than fp32"), std::string::npos) << *epyc;
  EXPECT_EQ(epyc->find('\n'), std::string::npos) << "one line";
  EXPECT_TRUE(bf16_emulation_note(kSkylakeX).has_value());
  const auto graviton2 = bf16_emulation_note(kGraviton2);
  ASSERT_TRUE(graviton2.has_value());
  EXPECT_NE(graviton2->find("(no bf16)"), std::string::npos) << *graviton2;
  EXPECT_FALSE(bf16_emulation_note(kSapphireRapids).has_value());
  EXPECT_FALSE(bf16_emulation_note(kGraviton3).has_value());
  EXPECT_FALSE(bf16_emulation_note({}).has_value()) << "no flags: nothing can be said";
}

}  // namespace
}  // namespace accelerate::detail
