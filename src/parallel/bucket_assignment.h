// How parameters are grouped into gradient buckets. Pure (no communication),
// so every process computes the same buckets from the same parameters.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "accelerate/parallel/gradient_reducer.h"

namespace accelerate {
namespace detail {

// The dtype a gradient travels in: bf16/fp16 go through float32, because
// Gloo cannot reduce bf16 and fp32 sums lose less precision anyway; float32
// goes as fp16/bf16 when a compression hook asks for it.
at::ScalarType wire_dtype_for(at::ScalarType gradient_dtype, CommHook hook = CommHook::kNone);

struct BucketCaps {
  std::int64_t first_bucket_bytes = 1 << 20;
  std::int64_t bucket_bytes = 25 << 20;
};
BucketCaps bucket_caps_from(const GradientSyncOptions& options);

// Buckets for the parameters that require grad, in launch order.
// Parameters are taken in reverse registration order and a bucket holds one
// dtype on one device; it is closed when the next parameter would push it
// past its cap (the first bucket of each dtype/device uses the first cap).
// Buckets are ordered by the reverse-order position of their first parameter,
// i.e. roughly the order in which backward completes them.
// `buffer_device` maps a parameter's device to where its bucket's buffer
// lives (the device the communication backend serves).
// `unit_of` (empty, or one entry per parameter): ZeRO stage 3's units. The
// parameters of unit u >= 0 share one bucket per dtype and device whatever
// the caps, and no bucket holds parameters of two units, or of a unit and
// none (-1). Units must be contiguous in registration order.
std::vector<GradientBucket> assign_buckets(
    const std::vector<at::Tensor>& parameters, const BucketCaps& caps,
    const std::function<c10::Device(c10::Device)>& buffer_device, CommHook hook = CommHook::kNone,
    const std::vector<int>& unit_of = {});

}  // namespace detail
}  // namespace accelerate
