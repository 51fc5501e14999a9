// The process group of one kind of model parallelism (SequenceParallel,
// TensorParallel): a communicator, or none for a group of one, in which case
// every operation of that kind is the plain computation. Each kind derives
// its own type, so a sequence-parallel group cannot be passed where a
// tensor-parallel one is meant.
#pragma once

#include <memory>
#include <utility>

#include "accelerate/distributed/communicator.h"

namespace accelerate::detail {

class ParallelGroup {
 public:
  int size() const { return group_ ? group_->world_size() : 1; }
  int rank() const { return group_ ? group_->rank() : 0; }
  bool enabled() const { return size() > 1; }
  // The group's communicator; null when size() is 1.
  const std::shared_ptr<Communicator>& group() const { return group_; }

 protected:
  ParallelGroup() = default;
  // `group`: the communicator of this process's group (null: one process).
  explicit ParallelGroup(std::shared_ptr<Communicator> group) : group_(std::move(group)) {
    if (group_ && group_->world_size() == 1) group_.reset();
  }

 private:
  std::shared_ptr<Communicator> group_;
};

}  // namespace accelerate::detail
