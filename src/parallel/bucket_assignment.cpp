#include "parallel/bucket_assignment.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "accelerate/common/errors.h"

namespace accelerate {
namespace detail {

at::ScalarType wire_dtype_for(at::ScalarType gradient_dtype, CommHook hook) {
  if (gradient_dtype == at::kBFloat16 || gradient_dtype == at::kHalf) return at::kFloat;
  if (gradient_dtype == at::kFloat && hook == CommHook::kFp16) return at::kHalf;
  if (gradient_dtype == at::kFloat && hook == CommHook::kBf16) return at::kBFloat16;
  return gradient_dtype;
}

BucketCaps bucket_caps_from(const GradientSyncOptions& options) {
  if (!(options.bucket_cap_mb() > 0) || !(options.first_bucket_cap_mb() > 0)) {
    throw ConfigError("bucket_cap_mb and first_bucket_cap_mb must be positive (got " +
                      std::to_string(options.bucket_cap_mb()) + " and " +
                      std::to_string(options.first_bucket_cap_mb()) + ")");
  }
  constexpr double kMiB = 1024.0 * 1024.0;  // DDP's "MB" is a MiB
  BucketCaps caps;
  caps.bucket_bytes = static_cast<std::int64_t>(options.bucket_cap_mb() * kMiB);
  caps.first_bucket_bytes = static_cast<std::int64_t>(options.first_bucket_cap_mb() * kMiB);
  return caps;
}

namespace {

// A bucket being filled, with the reverse-order position of its first
// parameter (its sort key) and how many buckets its group already closed.
struct OpenBucket {
  GradientBucket bucket;
  std::size_t first_position = 0;
  int closed_before = 0;
};

using GroupKey = std::tuple<int, int, int>;  // dtype, device type, device index

}  // namespace

std::vector<GradientBucket> assign_buckets(
    const std::vector<at::Tensor>& parameters, const BucketCaps& caps,
    const std::function<c10::Device(c10::Device)>& buffer_device, CommHook hook,
    const std::vector<int>& unit_of) {
  if (!unit_of.empty() && unit_of.size() != parameters.size()) {
    throw Error("gradient sync: unit_of has " + std::to_string(unit_of.size()) + " entries for " +
                std::to_string(parameters.size()) + " parameters");
  }
  std::vector<std::pair<std::size_t, GradientBucket>> closed;
  std::map<GroupKey, OpenBucket> open;
  const auto close_all = [&] {
    for (auto& entry : open) {
      if (entry.second.bucket.parameter_indices.empty()) continue;
      closed.emplace_back(entry.second.first_position, std::move(entry.second.bucket));
      entry.second.bucket = GradientBucket();
      ++entry.second.closed_before;
    }
  };
  const std::size_t count = parameters.size();
  int previous_unit = -1;
  for (std::size_t position = 0; position < count; ++position) {
    const std::size_t index = count - 1 - position;
    const at::Tensor& parameter = parameters[index];
    if (!parameter.defined()) {
      throw Error("gradient sync: parameter " + std::to_string(index) + " is undefined");
    }
    if (!parameter.requires_grad()) continue;
    // A unit's parameters fill buckets of their own, whatever the caps: its
    // buffer is what stage 3 gathers and frees as one.
    const int unit = unit_of.empty() ? -1 : unit_of[index];
    if (unit != previous_unit) close_all();
    previous_unit = unit;
    const at::ScalarType dtype = parameter.scalar_type();
    const GroupKey key{static_cast<int>(dtype), static_cast<int>(parameter.device().type()),
                       static_cast<int>(parameter.device().index())};
    OpenBucket& current = open[key];
    const at::ScalarType wire = wire_dtype_for(dtype, hook);
    const std::int64_t bytes =
        parameter.numel() * static_cast<std::int64_t>(c10::elementSize(wire));
    const std::int64_t cap =
        current.closed_before == 0 ? caps.first_bucket_bytes : caps.bucket_bytes;
    if (unit < 0 && !current.bucket.parameter_indices.empty() &&
        current.bucket.bytes + bytes > cap) {
      closed.emplace_back(current.first_position, std::move(current.bucket));
      current.bucket = GradientBucket();
      ++current.closed_before;
    }
    if (current.bucket.parameter_indices.empty()) {
      current.first_position = position;
      current.bucket.gradient_dtype = dtype;
      current.bucket.wire_dtype = wire;
      current.bucket.compressed = c10::elementSize(wire) < c10::elementSize(dtype);
      current.bucket.device = buffer_device(parameter.device());
    }
    current.bucket.parameter_indices.push_back(index);
    current.bucket.bytes += bytes;
  }
  for (auto& entry : open) {
    if (!entry.second.bucket.parameter_indices.empty()) {
      closed.emplace_back(entry.second.first_position, std::move(entry.second.bucket));
    }
  }
  std::stable_sort(closed.begin(), closed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<GradientBucket> buckets;
  buckets.reserve(closed.size());
  for (auto& entry : closed) buckets.push_back(std::move(entry.second));
  return buckets;
}

}  // namespace detail
}  // namespace accelerate
