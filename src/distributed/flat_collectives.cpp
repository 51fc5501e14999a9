// Communicator's reduce-scatter and all-gather of flat buffers, the
// collectives of sharded training (see accelerate/distributed/communicator.h and
// docs/sharding.md for how each backend does them and what they cost).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "accelerate/common/errors.h"
#include "accelerate/distributed/communicator.h"
#include "distributed/communicator_impl.h"
#include "distributed/shared_buffer_pool.h"

namespace accelerate {

namespace {

// The checks every flat-buffer collective makes before anything moves.
void check_flat_buffer(const char* operation, const at::Tensor& buffer, const at::Tensor& shard,
                       int world_size) {
  const std::string op = operation;
  if (!buffer.defined() || !shard.defined()) throw Error(op + ": undefined tensor");
  if (!buffer.is_contiguous() || !shard.is_contiguous()) {
    throw Error(op + " needs contiguous tensors");
  }
  if (buffer.scalar_type() != shard.scalar_type() || buffer.device() != shard.device()) {
    throw Error(op + ": the buffer is " + c10::toString(buffer.scalar_type()) + " on " +
                buffer.device().str() + " but the shard is " + c10::toString(shard.scalar_type()) +
                " on " + shard.device().str());
  }
  if (buffer.numel() != shard.numel() * world_size) {
    throw Error(op + ": the buffer holds " + std::to_string(buffer.numel()) + " elements, but " +
                std::to_string(world_size) + " shards of " + std::to_string(shard.numel()) +
                " make " + std::to_string(shard.numel() * world_size));
  }
}

// A wire dtype the low-precision forms can round `tensor` to.
void check_wire(const char* operation, const at::Tensor& tensor, at::ScalarType wire) {
  if (!at::isFloatingType(tensor.scalar_type()) || !at::isFloatingType(wire)) {
    throw Error(std::string(operation) + " in " + c10::toString(wire) + ": " +
                c10::toString(tensor.scalar_type()) +
                " tensors travel in another dtype only as floating-point values in a "
                "floating-point dtype");
  }
}

// shard = rows[0] + rows[1] + ... in rank order, accumulated in shard's
// dtype; `row(r)` is rank r's contribution (any floating dtype).
template <class Row>
void sum_rows_in_order(at::Tensor& shard, int world, Row&& row) {
  at::Tensor sum = shard.view({-1});
  sum.copy_(row(0));
  for (int r = 1; r < world; ++r) sum.add_(row(r));
}

}  // namespace

PendingCollective Communicator::reduce_scatter_sum_async(const at::Tensor& buffer,
                                                         at::Tensor& shard, const std::string& what,
                                                         at::ScalarType wire) {
  if (wire == buffer.scalar_type()) return reduce_scatter_sum_async(buffer, shard, what);
  check_flat_buffer("reduce_scatter_sum", buffer, shard, world_size());
  check_wire("reduce_scatter_sum", buffer, wire);
  if (impl_->single()) {
    shard.view({-1}).copy_(buffer.to(wire));
    return {};
  }
  bool stage_on_host = false;
  compat::Backend& backend = impl_->backend_for(buffer, &stage_on_host);
  if (stage_on_host) throw Error("reduce_scatter_sum_async: CUDA tensors need NCCL");
  if (&backend == impl_->gloo.get() && impl_->sums_in_shared_memory(buffer)) {
    // Shared memory sums in rank order already: round the contributions
    // where they lie and sum them as they are (no network to save bytes on).
    buffer.copy_(buffer.to(wire));
    return reduce_scatter_sum_async(buffer, shard, what);
  }
  return impl_->start_async(what, [&](PendingCollective::State& state) {
    const int world = world_size(), me = rank();
    const at::Tensor sent = buffer.to(wire).view({world, -1});
    const auto wire_bytes = static_cast<std::uint64_t>(sent[0].nbytes());
    if (&backend != impl_->gloo.get()) {  // NCCL: the rows to their owners, summed here
      impl_->traffic->count_exchange(TrafficKind::kReduceScatter, Transport::kNccl, wire_bytes);
      at::Tensor input = sent, received = at::empty_like(sent);
      std::vector<int64_t> equal_splits;
      state.works.push_back(backend.alltoall_base(received, input, equal_splits, equal_splits,
                                                  c10d::AllToAllOptions()));
      state.then = [received, shard, world]() mutable {
        sum_rows_in_order(shard, world, [&](int r) { return received[r]; });
      };
      return;
    }
    impl_->traffic->count_exchange(TrafficKind::kReduceScatter, Transport::kGloo, wire_bytes);
    at::Tensor received =
        impl_->staging->take((world - 1) * shard.numel(), sent.options()).view({world - 1, -1});
    const auto from = [me](int peer) { return peer < me ? peer : peer - 1; };
    impl_->exchange_pieces(state, shard.numel(), sent.element_size(), [&](int peer) {
      return std::make_pair(sent[peer], received[from(peer)]);
    });
    state.then = [sent, received, shard, world, me, from, pool = impl_->staging]() mutable {
      sum_rows_in_order(shard, world,
                        [&](int r) { return r == me ? sent[me] : received[from(r)]; });
      pool->give_back(received);
    };
  });
}

PendingCollective Communicator::all_to_all_async(const at::Tensor& send, at::Tensor& receive,
                                                 const std::string& what) {
  const int world = world_size();
  if (!send.defined() || !receive.defined() || !send.is_contiguous() || !receive.is_contiguous() ||
      send.scalar_type() != receive.scalar_type() || send.device() != receive.device() ||
      send.numel() != receive.numel() || send.numel() % world != 0) {
    throw Error(
        "all_to_all: send and receive must be contiguous tensors of one dtype, device "
        "and size, a multiple of the " +
        std::to_string(world) + " processes");
  }
  const at::Tensor rows = send.view({world, -1});
  const at::Tensor into = receive.view({world, -1});
  if (impl_->single()) {
    if (!receive.is_same(send)) into.copy_(rows);
    return {};
  }
  bool stage_on_host = false;
  compat::Backend& backend = impl_->backend_for(send, &stage_on_host);
  if (stage_on_host) throw Error("all_to_all_async: CUDA tensors need NCCL");
  const auto row_bytes = static_cast<std::uint64_t>(rows[0].nbytes());
  return impl_->start_async(what, [&](PendingCollective::State& state) {
    impl_->traffic->count_exchange(TrafficKind::kAllToAll, impl_->transport_of(backend), row_bytes);
    if (&backend != impl_->gloo.get()) {
      at::Tensor input = send, output = receive;
      std::vector<int64_t> equal_splits;
      state.works.push_back(backend.alltoall_base(output, input, equal_splits, equal_splits,
                                                  c10d::AllToAllOptions()));
      return;
    }
    impl_->exchange_pieces(state, rows.size(1), send.element_size(),
                           [&](int peer) { return std::make_pair(rows[peer], into[peer]); });
    into[rank()].copy_(rows[rank()]);
  });
}

PendingCollective Communicator::all_gather_into_async(const at::Tensor& shard, at::Tensor& buffer,
                                                      const std::string& what,
                                                      at::ScalarType wire) {
  if (wire == shard.scalar_type()) return all_gather_into_async(shard, buffer, what);
  check_flat_buffer("all_gather_into", buffer, shard, world_size());
  check_wire("all_gather_into", shard, wire);
  const at::Tensor sent = shard.to(wire).contiguous();
  at::Tensor arrived = at::empty({buffer.numel()}, sent.options());
  // Widened into `buffer` once every row is there.
  return all_gather_into_async(sent, arrived, what).then([arrived, buffer]() mutable {
    buffer.view({-1}).copy_(arrived);
  });
}

PendingCollective Communicator::reduce_scatter_sum_async(const at::Tensor& buffer,
                                                         at::Tensor& shard,
                                                         const std::string& what) {
  check_flat_buffer("reduce_scatter_sum", buffer, shard, world_size());
  if (buffer.scalar_type() == at::kBool) throw Error("reduce_scatter_sum cannot sum bool tensors");
  if (impl_->single()) {
    if (!shard.is_same(buffer)) shard.copy_(buffer.reshape(shard.sizes()));
    return {};
  }
  bool stage_on_host = false;
  compat::Backend& backend = impl_->backend_for(buffer, &stage_on_host);
  if (stage_on_host) throw Error("reduce_scatter_sum_async: CUDA tensors need NCCL");
  return impl_->start_async(what, [&](PendingCollective::State& state) {
    const auto shard_bytes = static_cast<std::uint64_t>(shard.nbytes());
    const auto others = static_cast<std::uint64_t>(world_size() - 1);
    if (&backend != impl_->gloo.get()) {  // NCCL reduce-scatters natively
      impl_->traffic->count_ring(TrafficKind::kReduceScatter, Transport::kNccl,
                                 others * shard_bytes);
      c10d::ReduceScatterOptions options;
      options.reduceOp = c10d::ReduceOp::SUM;
      at::Tensor input = buffer;
      state.works.push_back(backend._reduce_scatter_base(shard, input, options));
      return;
    }
    if (impl_->sums_in_shared_memory(buffer)) {
      impl_->traffic->count_exchange(TrafficKind::kReduceScatter, Transport::kSharedMemory,
                                     shard_bytes);
      state.shared_memory = impl_->shared_memory->reduce_scatter_async(buffer, shard, what);
      return;
    }
    impl_->traffic->count_exchange(TrafficKind::kReduceScatter, Transport::kGloo, shard_bytes);
    // Gloo: every rank sends shard r of its buffer to rank r, then adds
    // what it received in rank order.
    const int world = world_size(), me = rank();
    const at::Tensor rows = buffer.view({world, -1});
    // One row per peer (this rank's own contribution stays in `buffer`).
    at::Tensor received =
        impl_->staging->take((world - 1) * shard.numel(), buffer.options()).view({world - 1, -1});
    const auto from = [me](int peer) { return peer < me ? peer : peer - 1; };
    impl_->exchange_pieces(state, shard.numel(), shard.element_size(), [&](int peer) {
      return std::make_pair(rows[peer], received[from(peer)]);
    });
    state.then = [rows, received, shard, world, me, from, pool = impl_->staging]() mutable {
      // ((x0 + x1) + x2) ...; `shard` may be rows[me] itself, so a rank
      // other than 0 sums into rank 0's received row and copies at the end.
      at::Tensor sum = me == 0 ? shard.view({-1}) : received[0];
      if (me == 0) sum.copy_(rows[0]);
      for (int r = 1; r < world; ++r) sum.add_(r == me ? rows[me] : received[from(r)]);
      if (me != 0) shard.view({-1}).copy_(sum);
      pool->give_back(received);
    };
  });
}

at::Tensor Communicator::reduce_scatter_buffer(std::int64_t numel,
                                               const at::TensorOptions& options) {
  if (impl_->shared_memory && options.device().is_cpu() &&
      detail::SharedMemoryCollectives::serves_dtype(c10::typeMetaToScalarType(options.dtype()))) {
    at::Tensor shared = impl_->shared_memory->shared_buffer(numel, options);
    if (shared.defined()) return shared;
  }
  return at::empty({numel}, options);
}

SharedBufferUsage Communicator::shared_buffer_usage() const {
  return impl_->shared_memory ? impl_->shared_memory->buffer_pool().usage() : SharedBufferUsage();
}

void Communicator::reset_shared_buffer_peak() {
  if (impl_->shared_memory) impl_->shared_memory->buffer_pool().reset_peak();
}

void Communicator::reduce_scatter_sum(const at::Tensor& buffer, at::Tensor& shard) {
  check_flat_buffer("reduce_scatter_sum", buffer, shard, world_size());
  // CUDA tensors without NCCL go through host copies (the async form refuses them).
  if (!impl_->stages_on_host(buffer)) {
    return reduce_scatter_sum_async(buffer, shard, "reduce_scatter").wait();
  }
  at::Tensor host_shard = shard.cpu();
  reduce_scatter_sum_async(buffer.cpu(), host_shard, "reduce_scatter").wait();
  shard.copy_(host_shard);
}

PendingCollective Communicator::all_gather_into_async(const at::Tensor& shard, at::Tensor& buffer,
                                                      const std::string& what) {
  check_flat_buffer("all_gather_into", buffer, shard, world_size());
  if (impl_->single()) {
    if (!shard.is_same(buffer)) buffer.copy_(shard.reshape(buffer.sizes()));
    return {};
  }
  bool stage_on_host = false;
  compat::Backend& backend = impl_->backend_for(buffer, &stage_on_host);
  if (stage_on_host) throw Error("all_gather_into_async: CUDA tensors need NCCL");
  return impl_->start_async(what, [&](PendingCollective::State& state) {
    const auto shard_bytes = static_cast<std::uint64_t>(shard.nbytes());
    if (&backend != impl_->gloo.get()) {  // NCCL gathers into one buffer natively
      impl_->traffic->count_ring(TrafficKind::kAllGather, Transport::kNccl,
                                 static_cast<std::uint64_t>(world_size() - 1) * shard_bytes);
      at::Tensor input = shard;
      state.works.push_back(backend._allgather_base(buffer, input, c10d::AllgatherOptions()));
      return;
    }
    if (impl_->shared_memory && detail::SharedMemoryCollectives::moves(buffer)) {
      impl_->traffic->count_exchange(TrafficKind::kAllGather, Transport::kSharedMemory,
                                     shard_bytes);
      state.shared_memory = impl_->shared_memory->all_gather_async(shard, buffer, what);
      return;
    }
    impl_->traffic->count_exchange(TrafficKind::kAllGather, Transport::kGloo, shard_bytes);
    // Gloo: this rank's shard to every peer, theirs into their rows.
    const at::Tensor rows = buffer.view({world_size(), -1});
    const at::Tensor source = shard.view({-1});
    impl_->exchange_pieces(state, shard.numel(), shard.element_size(),
                           [&](int peer) { return std::make_pair(source, rows[peer]); });
    if (!source.is_same(rows[rank()])) rows[rank()].copy_(source);
  });
}

void Communicator::all_gather_into(const at::Tensor& shard, at::Tensor& buffer) {
  check_flat_buffer("all_gather_into", buffer, shard, world_size());
  if (!impl_->stages_on_host(buffer))
    return all_gather_into_async(shard, buffer, "all_gather").wait();
  at::Tensor host_buffer = buffer.cpu();
  all_gather_into_async(shard.cpu(), host_buffer, "all_gather").wait();
  buffer.copy_(host_buffer);
}

}  // namespace accelerate
