#include "accelerate/common/malloc_tuning.h"

#include "accelerate/detail/enum_names.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace accelerate {
namespace {

bool environment_chooses_thresholds(const Environment& env) {
  for (const char* name :
       {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_MAX_"}) {
    if (lookup(env, name)) return true;
  }
  const auto tunables = lookup(env, "GLIBC_TUNABLES");
  if (!tunables) return false;
  for (const char* name :
       {"glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold", "glibc.malloc.mmap_max"}) {
    if (tunables->find(name) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

MallocTuningResult tune_malloc_for_training(const Environment& env) {
#if defined(__GLIBC__)
  if (environment_chooses_thresholds(env)) return MallocTuningResult::kLeftToEnvironment;
  // Setting either one also turns off glibc's adaptive adjustment of both.
  // mallopt returns 0 for a value this glibc refuses (e.g. a 32-bit build,
  // whose largest mmap threshold is smaller).
  const bool applied = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kTunedMmapThresholdBytes)) &&
                       mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTunedTrimThresholdBytes)) &&
                       mallopt(M_MMAP_MAX, kTunedMmapMax);
  return applied ? MallocTuningResult::kApplied : MallocTuningResult::kUnsupported;
#else
  (void)env;
  return MallocTuningResult::kUnsupported;
#endif
}

const char* to_string(MallocTuningResult result) {
  static constexpr detail::EnumName<MallocTuningResult> kMallocTuningResultNames[] = {
      {MallocTuningResult::kApplied, "applied"},
      {MallocTuningResult::kLeftToEnvironment, "left to the environment"},
      {MallocTuningResult::kUnsupported, "unsupported"}};
  static_assert(detail::names_are_distinct(kMallocTuningResultNames));
  return detail::enum_name(kMallocTuningResultNames, result, "unknown");
}

}  // namespace accelerate
