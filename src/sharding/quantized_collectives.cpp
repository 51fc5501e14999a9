#include "sharding/quantized_collectives.h"

#include <string>

#include <ATen/ATen.h>

#include "accelerate/errors.h"

namespace accelerate::sharding {
namespace {

void check_quantized_rows(const char* operation, const at::Tensor& whole, const at::Tensor& row,
                          int world) {
  const std::string op = operation;
  if (!whole.defined() || !row.defined() || !whole.is_contiguous() || !row.is_contiguous()) {
    throw Error(op + " needs defined contiguous tensors");
  }
  if (!whole.device().is_cpu() || !row.device().is_cpu()) {
    throw Error(op + ": the quantizer runs on CPU tensors only");
  }
  if (!at::isFloatingType(whole.scalar_type()) || !at::isFloatingType(row.scalar_type())) {
    throw Error(op + " quantizes floating-point tensors, not " +
                c10::toString(whole.scalar_type()));
  }
  if (whole.numel() != row.numel() * world) {
    throw Error(op + ": " + std::to_string(whole.numel()) + " elements are not " +
                std::to_string(world) + " rows of " + std::to_string(row.numel()));
  }
}

}  // namespace

PendingCollective quantized_all_gather(Communicator& communicator, const at::Tensor& shard,
                                       at::Tensor& buffer, const std::string& what,
                                       const QuantizedWire& wire) {
  const int world = communicator.world_size();
  check_quantized_rows("quantized all-gather", buffer, shard, world);
  const quantize::BlockFormat format =
      quantize::block_format(shard.numel(), wire.bits, wire.block_size);
  const at::Tensor sent = quantize::quantize(shard, wire.bits, wire.block_size);
  at::Tensor arrived = at::empty({world * format.wire_bytes()}, at::kByte);
  return communicator.all_gather_into_async(sent, arrived, what)
      .then([arrived, buffer, world, wire]() mutable {
        const at::Tensor wires = arrived.view({world, -1});
        const at::Tensor rows = buffer.view({world, -1});
        for (int r = 0; r < world; ++r) {
          quantize::dequantize_into(wires[r], wire.bits, wire.block_size, rows[r]);
        }
      });
}

PendingCollective quantized_reduce_scatter(Communicator& communicator, const at::Tensor& buffer,
                                           at::Tensor& shard, const std::string& what,
                                           const QuantizedWire& wire) {
  const int world = communicator.world_size();
  check_quantized_rows("quantized reduce-scatter", buffer, shard, world);
  if (shard.scalar_type() != at::kFloat) {
    throw Error("quantized reduce-scatter sums into an fp32 shard, not " +
                std::string(c10::toString(shard.scalar_type())));
  }
  const quantize::BlockFormat format =
      quantize::block_format(shard.numel(), wire.bits, wire.block_size);
  // Each destination's row quantized alone, so its blocks start with it.
  at::Tensor sent = at::empty({world, format.wire_bytes()}, at::kByte);
  const at::Tensor rows = buffer.view({world, -1});
  for (int r = 0; r < world; ++r) {
    quantize::quantize_into(rows[r], wire.bits, wire.block_size, sent[r]);
  }
  at::Tensor arrived = at::empty_like(sent);
  return communicator.all_to_all_async(sent, arrived, what)
      .then([arrived, shard, world, wire]() mutable {
        at::Tensor sum = shard.view({-1});
        sum.zero_();  // then each rank's values added in rank order
        for (int r = 0; r < world; ++r) {
          quantize::dequantize_accumulate(arrived[r], wire.bits, wire.block_size, sum);
        }
      });
}

}  // namespace accelerate::sharding
