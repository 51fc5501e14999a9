// A process group kept in an autograd context until backward: the
// differentiable collectives of sequence and tensor parallelism save their
// communicator as a capsule in ctx->saved_data, since a Function's apply()
// takes tensors and IValues only.
#pragma once

#include <memory>
#include <utility>

#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/custom_function.h>

#include "accelerate/distributed/communicator.h"

namespace accelerate::detail {

struct GroupCapsule : torch::CustomClassHolder {
  explicit GroupCapsule(std::shared_ptr<Communicator> g) : group(std::move(g)) {}
  std::shared_ptr<Communicator> group;
};

inline c10::IValue capsule_of(const std::shared_ptr<Communicator>& group) {
  return c10::IValue::make_capsule(c10::make_intrusive<GroupCapsule>(group));
}

inline Communicator& group_of(const c10::IValue& capsule) {
  return *c10::static_intrusive_pointer_cast<GroupCapsule>(capsule.toCapsule())->group;
}

// The communicator saved under "group" (by the Function's forward).
inline Communicator& group_in(torch::autograd::AutogradContext* ctx) {
  return group_of(ctx->saved_data["group"]);
}

}  // namespace accelerate::detail
