// Moving a built-in optimizer's per-parameter state between parameters of
// other shapes, element by element: what loading sharded (ZeRO) optimizer
// state on another number of processes needs, where the saved shards and
// this process's shard cut the same flat buffers at other places.
// Internal to the library.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace accelerate::checkpoint {

// An optimizer of `like`'s built-in type (SGD, Adam, AdamW, Adagrad,
// RMSprop) over `params_by_group`, group g with a copy of like's group g
// options. Throws Error for any other type.
std::unique_ptr<torch::optim::Optimizer> make_optimizer_like(
    const torch::optim::Optimizer& like,
    const std::vector<std::vector<at::Tensor>>& params_by_group);

// Copies elements [from_offset, from_offset + count) of every state tensor
// of `from_param` in `from` (flattened) into [to_offset, to_offset + count)
// of `to_param`'s in `to`. When `to_param` has no state yet it gets one: the
// non-tensor fields (step) copied, the tensors zero. Nothing when
// `from_param` has no state. Both optimizers of one built-in type.
void copy_state_slice(const torch::optim::Optimizer& from, const at::Tensor& from_param,
                      int64_t from_offset, torch::optim::Optimizer& to, const at::Tensor& to_param,
                      int64_t to_offset, int64_t count);

// Every group's options (learning rate, ...) of `from` into `to`.
void copy_group_options(const torch::optim::Optimizer& from, torch::optim::Optimizer& to);

}  // namespace accelerate::checkpoint
