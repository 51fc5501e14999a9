// Bucket assignment: reverse registration order, caps, the small first
// bucket, one dtype per bucket, frozen parameters left out.
#include "parallel/bucket_assignment.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "accelerate/common/errors.h"
#include "accelerate/parallel/gradient_reducer.h"
#include "support/thread_ranks.h"

using accelerate::Communicator;
using accelerate::GradientBucket;
using accelerate::GradientReducer;
using accelerate::GradientSyncOptions;
using accelerate::testing::run_ranks;

using accelerate::testing::borrow;

namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * 1024;

torch::Tensor parameter_of_bytes(int64_t bytes, torch::Dtype dtype = torch::kFloat) {
  const int64_t element = static_cast<int64_t>(c10::elementSize(dtype));
  return torch::zeros({bytes / element}, dtype).set_requires_grad(true);
}

std::vector<std::vector<size_t>> layout(const std::vector<GradientBucket>& buckets) {
  std::vector<std::vector<size_t>> indices;
  for (const auto& b : buckets) indices.push_back(b.parameter_indices);
  return indices;
}

std::vector<int64_t> sizes_of(const std::vector<GradientBucket>& buckets) {
  std::vector<int64_t> bytes;
  for (const auto& b : buckets) bytes.push_back(b.bytes);
  return bytes;
}

// Six float parameters of known sizes, registration order p0..p5.
std::vector<torch::Tensor> six_parameters() {
  return {parameter_of_bytes(1 * kMiB), parameter_of_bytes(4 * kKiB), parameter_of_bytes(4 * kMiB),
          parameter_of_bytes(256),      parameter_of_bytes(2 * kMiB), parameter_of_bytes(64)};
}

TEST(BucketAssignment, ReverseOrderWithSmallFirstBucketAndCaps) {
  // Reverse order p5 p4 p3 p2 p1 p0. First cap 1 MiB: p5 (64 B) fits, p4
  // (2 MiB) would not. Then 5 MiB caps: p4+p3, then p2+p1 (p0 would make
  // 5 MiB + 4 KiB), then p0.
  auto params = six_parameters();
  GradientSyncOptions options = GradientSyncOptions().bucket_cap_mb(5).first_bucket_cap_mb(1);
  auto buckets = accelerate::detail::assign_buckets(
      params, accelerate::detail::bucket_caps_from(options), [](c10::Device d) { return d; });
  EXPECT_EQ(layout(buckets), (std::vector<std::vector<size_t>>{{5}, {4, 3}, {2, 1}, {0}}));
  EXPECT_EQ(sizes_of(buckets),
            (std::vector<int64_t>{64, 2 * kMiB + 256, 4 * kMiB + 4 * kKiB, 1 * kMiB}));
  for (const auto& b : buckets) {
    EXPECT_EQ(b.wire_dtype, torch::kFloat);
    EXPECT_EQ(b.device, c10::Device(c10::kCPU));
  }
}

TEST(BucketAssignment, ReducerOnOneProcessReportsTheSameBucketsAndLeavesGradsAlone) {
  auto params = six_parameters();
  for (auto& p : params) p.mutable_grad() = torch::ones_like(p);
  run_ranks(1, [&](Communicator& comm) {
    GradientReducer reducer(borrow(comm), params,
                            GradientSyncOptions().bucket_cap_mb(5).first_bucket_cap_mb(1));
    EXPECT_EQ(layout(reducer.buckets()),
              (std::vector<std::vector<size_t>>{{5}, {4, 3}, {2, 1}, {0}}));
    reducer.finalize_backward();
    for (auto& p : params) EXPECT_TRUE(torch::equal(p.grad(), torch::ones_like(p)));
    EXPECT_EQ(reducer.last_step_stats().synced_steps, 0);
    EXPECT_EQ(reducer.last_step_stats().bucket_count, 4);
  });
}

TEST(BucketAssignment, DefaultCapsAreDdpsAndMeasuredInMiB) {
  GradientSyncOptions defaults;
  EXPECT_EQ(defaults.bucket_cap_mb(), 25.0);
  EXPECT_EQ(defaults.first_bucket_cap_mb(), 1.0);
  EXPECT_FALSE(defaults.find_unused_parameters());
  EXPECT_TRUE(defaults.broadcast_buffers());
  auto caps = accelerate::detail::bucket_caps_from(defaults);
  EXPECT_EQ(caps.bucket_bytes, 25 * kMiB);
  EXPECT_EQ(caps.first_bucket_bytes, 1 * kMiB);
  EXPECT_THROW(accelerate::detail::bucket_caps_from(GradientSyncOptions().bucket_cap_mb(0)),
               accelerate::ConfigError);
}

TEST(BucketAssignment, CapIsInclusiveAndAnOversizedParameterIsAlone) {
  // Exactly 1 MiB fills the first bucket; 3 MiB is larger than the 2 MiB cap.
  std::vector<torch::Tensor> params{parameter_of_bytes(512 * kKiB), parameter_of_bytes(3 * kMiB),
                                    parameter_of_bytes(512 * kKiB), parameter_of_bytes(512 * kKiB)};
  auto buckets = accelerate::detail::assign_buckets(
      params,
      accelerate::detail::bucket_caps_from(
          GradientSyncOptions().bucket_cap_mb(2).first_bucket_cap_mb(1)),
      [](c10::Device d) { return d; });
  EXPECT_EQ(layout(buckets), (std::vector<std::vector<size_t>>{{3, 2}, {1}, {0}}));
}

TEST(BucketAssignment, FrozenParametersAreLeftOut) {
  auto params = six_parameters();
  params[2].set_requires_grad(false);  // the 4 MiB one
  params[5].set_requires_grad(false);
  auto buckets = accelerate::detail::assign_buckets(
      params,
      accelerate::detail::bucket_caps_from(
          GradientSyncOptions().bucket_cap_mb(5).first_bucket_cap_mb(1)),
      [](c10::Device d) { return d; });
  // Reverse order p4 p3 p1 p0: p4 (2 MiB) is larger than the first cap, so
  // it fills the first bucket alone; p3, p1 and p0 share a 5 MiB bucket.
  EXPECT_EQ(layout(buckets), (std::vector<std::vector<size_t>>{{4}, {3, 1, 0}}));
}

TEST(BucketAssignment, OneDtypePerBucketAndLowPrecisionTravelsAsFloat) {
  // Registration: f0 float, h1 bf16, d2 double, f3 float, h4 bf16.
  std::vector<torch::Tensor> params{
      parameter_of_bytes(4 * kKiB), parameter_of_bytes(2 * kKiB, torch::kBFloat16),
      parameter_of_bytes(8 * kKiB, torch::kDouble), parameter_of_bytes(4 * kKiB),
      parameter_of_bytes(2 * kKiB, torch::kBFloat16)};
  auto buckets = accelerate::detail::assign_buckets(
      params, accelerate::detail::bucket_caps_from(GradientSyncOptions()),
      [](c10::Device d) { return d; });
  // Ordered by the reverse position of each bucket's first parameter:
  // bf16 {4,1} (starts at h4), float {3,0} (f3), double {2} (d2).
  EXPECT_EQ(layout(buckets), (std::vector<std::vector<size_t>>{{4, 1}, {3, 0}, {2}}));
  EXPECT_EQ(buckets[0].gradient_dtype, torch::kBFloat16);
  EXPECT_EQ(buckets[0].wire_dtype, torch::kFloat);
  EXPECT_EQ(buckets[0].bytes, 2 * 2 * (2 * kKiB));  // numel doubled by float32
  EXPECT_EQ(buckets[1].wire_dtype, torch::kFloat);
  EXPECT_EQ(buckets[2].wire_dtype, torch::kDouble);
  EXPECT_EQ(buckets[2].bytes, 8 * kKiB);
}

}  // namespace
