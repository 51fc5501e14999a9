#include "sharding/quantized_collectives.h"

#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "accelerate/common/errors.h"

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

// Quantizes rows[indices[i]] into wire row i, each row alone so that its
// blocks start with it.
at::Tensor quantize_rows(const at::Tensor& rows, const std::vector<std::int64_t>& indices,
                         const QuantizedWire& wire, std::int64_t row_wire_bytes) {
  at::Tensor sent =
      at::empty({static_cast<std::int64_t>(indices.size()), row_wire_bytes}, at::kByte);
  for (std::size_t i = 0; i < indices.size(); ++i) {
    quantize::quantize_into(rows[indices[i]], wire.bits, wire.block_size,
                            sent[static_cast<std::int64_t>(i)]);
  }
  return sent;
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
  std::vector<std::int64_t> every_row(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) every_row[static_cast<std::size_t>(r)] = r;
  at::Tensor sent = quantize_rows(buffer.view({world, -1}), every_row, wire, format.wire_bytes());
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

PendingCollective quantized_reduce_scatter_two_level(Communicator& machine, Communicator& across,
                                                     const at::Tensor& buffer, at::Tensor& shard,
                                                     const std::string& what,
                                                     const QuantizedWire& wire) {
  const int g = machine.world_size(), r = across.world_size();
  check_quantized_rows("quantized reduce-scatter", buffer, shard, g * r);
  if (shard.scalar_type() != at::kFloat) {
    throw Error("quantized reduce-scatter sums into an fp32 shard, not " +
                std::string(c10::toString(shard.scalar_type())));
  }
  const std::int64_t row_bytes =
      quantize::block_format(shard.numel(), wire.bits, wire.block_size).wire_bytes();
  // To local peer i: for each machine m, the row of job rank m*G + i.
  std::vector<std::int64_t> order;
  for (int i = 0; i < g; ++i) {
    for (int m = 0; m < r; ++m) order.push_back(static_cast<std::int64_t>(m) * g + i);
  }
  at::Tensor sent = quantize_rows(buffer.view({g * r, -1}), order, wire, row_bytes);
  const at::Tensor to_peers = sent.view({g, -1});
  at::Tensor arrived = at::empty_like(to_peers);
  PendingCollective inside = machine.all_to_all_async(to_peers, arrived, what);
  Communicator* across_machines = &across;
  return std::move(inside).then(
      [arrived, shard, g, r, wire, row_bytes, what, across_machines]() mutable {
        // partial[m]: the sum over this machine's processes of the row that
        // machine m's process with this local rank owns.
        at::Tensor partial = at::zeros({r, shard.numel()}, at::kFloat);
        const at::Tensor from = arrived.view({g, r, row_bytes});
        for (int i = 0; i < g; ++i) {
          for (int m = 0; m < r; ++m) {
            at::Tensor row = partial[m];
            quantize::dequantize_accumulate(from[i][m], wire.bits, wire.block_size, row);
          }
        }
        std::vector<std::int64_t> machines(static_cast<std::size_t>(r));
        for (int m = 0; m < r; ++m) machines[static_cast<std::size_t>(m)] = m;
        at::Tensor second = quantize_rows(partial, machines, wire, row_bytes);
        at::Tensor received = at::empty_like(second);
        across_machines->all_to_all_async(second, received, what).wait();
        at::Tensor sum = shard.view({-1});
        sum.zero_();
        for (int m = 0; m < r; ++m) {
          quantize::dequantize_accumulate(received[m], wire.bits, wire.block_size, sum);
        }
      });
}

}  // namespace accelerate::sharding
