#include "parallel/state_broadcast.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <map>
#include <tuple>

#include "accelerate/parallel/gradient_reducer.h"

namespace accelerate {
namespace detail {

namespace {

void broadcast_chunk(Communicator& communicator, const std::vector<at::Tensor>& chunk) {
  if (chunk.size() == 1) {
    at::Tensor only = chunk.front();
    communicator.broadcast(only, 0);
    return;
  }
  std::vector<at::Tensor> flat_pieces;
  flat_pieces.reserve(chunk.size());
  for (const auto& tensor : chunk) flat_pieces.push_back(tensor.reshape({-1}));
  at::Tensor flat = at::cat(flat_pieces);
  communicator.broadcast(flat, 0);
  std::int64_t offset = 0;
  for (const auto& tensor : chunk) {
    const std::int64_t numel = tensor.numel();
    at::Tensor target = tensor;  // shares storage: copy_ writes into the caller's tensor
    target.copy_(flat.narrow(0, offset, numel).view(tensor.sizes()));
    offset += numel;
  }
}

}  // namespace

void broadcast_coalesced(Communicator& communicator, const std::vector<at::Tensor>& tensors,
                         std::int64_t chunk_bytes) {
  if (communicator.world_size() == 1) return;
  c10::NoGradGuard no_grad;
  // Grouped in a deterministic order (dtype, device, then list order) so every
  // process issues the same collectives.
  using Key = std::tuple<int, int, int>;
  std::map<Key, std::vector<at::Tensor>> groups;
  for (const auto& tensor : tensors) {
    if (!tensor.defined() || tensor.numel() == 0) continue;
    groups[Key{static_cast<int>(tensor.scalar_type()), static_cast<int>(tensor.device().type()),
               static_cast<int>(tensor.device().index())}]
        .push_back(tensor);
  }
  for (auto& group : groups) {
    std::vector<at::Tensor> chunk;
    std::int64_t chunk_size = 0;
    for (const auto& tensor : group.second) {
      const std::int64_t bytes = tensor.numel() * static_cast<std::int64_t>(tensor.element_size());
      if (!chunk.empty() && chunk_size + bytes > chunk_bytes) {
        broadcast_chunk(communicator, chunk);
        chunk.clear();
        chunk_size = 0;
      }
      chunk.push_back(tensor);
      chunk_size += bytes;
    }
    if (!chunk.empty()) broadcast_chunk(communicator, chunk);
  }
}

}  // namespace detail

void broadcast_module_state(Communicator& communicator, torch::nn::Module& module,
                            bool include_buffers) {
  std::vector<at::Tensor> state = module.parameters(/*recurse=*/true);
  if (include_buffers) {
    for (auto& buffer : module.buffers(/*recurse=*/true)) state.push_back(buffer);
  }
  detail::broadcast_coalesced(communicator, state);
}

}  // namespace accelerate
