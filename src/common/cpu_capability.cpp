#include "common/cpu_capability.h"

#include <algorithm>

#include "accelerate/common/errors.h"
#include "accelerate/detail/enum_names.h"
#include "common/cpu_info.h"
#include "common/settings.h"

namespace accelerate {
namespace {

// Lowest first, as kAllCpuCapabilities (the assert holds them in step).
constexpr detail::EnumName<CpuCapability> kCpuCapabilityNames[] = {
    {CpuCapability::kDefault, "default"},
    {CpuCapability::kAvx2, "avx2"},
    {CpuCapability::kAvx512, "avx512"}};
static_assert(detail::names_are_distinct(kCpuCapabilityNames));
static_assert(detail::same_values(kCpuCapabilityNames, kAllCpuCapabilities));

}  // namespace

const char* to_string(CpuCapability capability) {
  return detail::enum_name(kCpuCapabilityNames, capability, "default");
}

std::optional<CpuCapability> parse_cpu_capability(std::string_view text) {
  return detail::parse_enum(kCpuCapabilityNames, text, detail::NameCase::kExact);
}

namespace detail {
namespace {

bool has(const std::vector<std::string>& flags, const std::string& flag) {
  return std::find(flags.begin(), flags.end(), flag) != flags.end();
}

// The first flag up to `capability` that `cpu_flags` lacks, or "".
std::string first_missing_flag(CpuCapability capability,
                               const std::vector<std::string>& cpu_flags) {
  for (CpuCapability level : kAllCpuCapabilities) {
    if (level > capability) break;
    for (const std::string& flag : flags_added_by(level)) {
      if (!has(cpu_flags, flag)) return flag;
    }
  }
  return "";
}

}  // namespace

const std::vector<std::string>& flags_added_by(CpuCapability capability) {
  static const std::vector<std::string> kNone;
  static const std::vector<std::string> kV3 = {"avx", "avx2", "bmi1",  "bmi2", "f16c",
                                               "fma", "abm",  "movbe", "xsave"};
  static const std::vector<std::string> kV4 = {"avx512f", "avx512bw", "avx512cd", "avx512dq",
                                               "avx512vl"};
  switch (capability) {
    case CpuCapability::kAvx2:
      return kV3;
    case CpuCapability::kAvx512:
      return kV4;
    case CpuCapability::kDefault:
      break;
  }
  return kNone;
}

CpuCapability highest_cpu_capability(const std::vector<std::string>& cpu_flags) {
  CpuCapability highest = CpuCapability::kDefault;
  for (CpuCapability level : kAllCpuCapabilities) {
    const auto& added = flags_added_by(level);
    if (!std::all_of(added.begin(), added.end(),
                     [&](const std::string& flag) { return has(cpu_flags, flag); })) {
      break;
    }
    highest = level;
  }
  return highest;
}

CpuCapability resolve_cpu_capability(const Environment& env,
                                     const std::vector<std::string>& cpu_flags) {
  const CpuCapability highest = highest_cpu_capability(cpu_flags);
  const auto asked = settings::kCpuCapability.read(env);
  if (!asked) return highest;
  if (*asked > highest) {
    throw ConfigError(std::string(settings::kCpuCapability.variable()) + "=" + to_string(*asked) +
                      " asks for instructions this CPU lacks: its flags have no " +
                      first_missing_flag(*asked, cpu_flags) + " (the highest here is " +
                      to_string(highest) + ")");
  }
  return *asked;
}

}  // namespace detail

CpuCapability kernel_capability() {
  // Resolved once: a kernel must not change copies between a forward and its
  // backward. A throw leaves it unresolved, so every call reports the error.
  static const CpuCapability capability = detail::resolve_cpu_capability(
      current_environment(), detail::parse_cpuinfo(detail::read_cpuinfo()).flags);
  return capability;
}

}  // namespace accelerate
