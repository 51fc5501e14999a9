// Broadcasting many tensors with few collectives.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "accelerate/distributed/communicator.h"

namespace accelerate {
namespace detail {

// DDP's broadcast bucket size: large enough that a model needs few
// collectives, small enough that the temporary copy stays modest.
constexpr std::int64_t kBroadcastChunkBytes = 250LL << 20;

// Overwrites every tensor in place with process 0's values. Tensors of one
// dtype and device are packed into flat chunks of at most `chunk_bytes` (a
// larger tensor travels alone), so a model with hundreds of buffers costs a
// handful of collectives. Runs without recording autograd history.
void broadcast_coalesced(Communicator& communicator, const std::vector<at::Tensor>& tensors,
                         std::int64_t chunk_bytes = kBroadcastChunkBytes);

}  // namespace detail
}  // namespace accelerate
