// How autograd's graph nodes are held. LibTorch handed out gradient
// accumulators as std::shared_ptr<Node> up to the 2.x releases of 2025 and
// as c10::intrusive_ptr<Node> since; the alias takes whichever this
// LibTorch's grad_accumulator() returns, so no probe or #if is needed.
#pragma once

#include <utility>

#include <torch/csrc/autograd/variable.h>

namespace accelerate {
namespace compat {

using AutogradNodePtr =
    decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));

}  // namespace compat
}  // namespace accelerate
