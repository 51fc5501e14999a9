// ZeRO++'s quantized collectives, built on the Communicator's byte
// transfers and the block quantizer (src/quantize/): qwZ gathers parameter
// shards as block-wise int8, qgZ reduce-scatters gradients as block-wise
// int4 or int8 (docs/sharding.md, "Quantized communication"). Values are
// dequantized on receipt; every process, the sender included, uses the
// dequantized values, so all hold the same bits, and sums run in fp32 in
// rank order, so results do not depend on the transport or on threads.
// Internal to the library.
#pragma once

#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

#include "accelerate/distributed/communicator.h"
#include "quantize/block_quantize.h"

namespace accelerate::sharding {

// How values travel: the width of a quantized element and the block that
// shares one scale.
struct QuantizedWire {
  quantize::QuantBits bits = quantize::QuantBits::kInt8;
  std::int64_t block_size = quantize::kDefaultBlockSize;
};

// qwZ: `buffer` (world_size rows of shard.numel()) gets every process's
// shard, quantized by its owner and dequantized into buffer's dtype (its
// own row too). Floating-point CPU tensors.
PendingCollective quantized_all_gather(Communicator& communicator, const at::Tensor& shard,
                                       at::Tensor& buffer, const std::string& what,
                                       const QuantizedWire& wire);

// qgZ: `shard` (fp32) = the sum over processes, in rank order, of row
// rank() of each one's `buffer`, quantized by its sender (block by block
// within each row) and dequantized here. A block holding NaN or an
// infinity arrives as NaN, so an overflow is still seen by the shard's
// owner. Floating-point CPU buffer.
PendingCollective quantized_reduce_scatter(Communicator& communicator, const at::Tensor& buffer,
                                           at::Tensor& shard, const std::string& what,
                                           const QuantizedWire& wire);

// qgZ across machines, as DeepSpeed runs it: `machine` holds this
// machine's G processes (ranks node*G + i, consecutive as launchers number
// them) and `across` the R processes with this one's local rank, one per
// machine; `buffer` has G*R rows, row k for job rank k. First an
// all-to-all inside the machine: each process receives, for every machine,
// the row of that machine's process with its own local rank from each
// local peer, quantized, and sums them in fp32 in local-rank order; then
// those R partial sums, quantized again, go to their machines in an
// all-to-all across, where the owner adds them in machine order. Only
// 1/G of the bytes cross machines (the one-level form sends (N-G)/N of
// them); each value is quantized twice. The second step runs when the
// first is waited for, so `across` must outlive that wait().
PendingCollective quantized_reduce_scatter_two_level(Communicator& machine, Communicator& across,
                                                     const at::Tensor& buffer, at::Tensor& shard,
                                                     const std::string& what,
                                                     const QuantizedWire& wire);

}  // namespace accelerate::sharding
