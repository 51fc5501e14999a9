// DeviceMesh: the job's processes laid out on named dimensions (dp_replicate,
// dp_shard, sp, tp; distributed/mesh_layout.h), and the one place the library
// forms its process groups. Each engine and the Accelerator ask it for the
// group along the dimensions they work over; the first request forms the
// whole partition (collective: every process asks for the same groups in
// the same order, as the code paths that ask are the same on every
// process), later ones return the same communicator. A group along every
// dimension of size above 1 is the job's own communicator: no new group.
// Internal.
#pragma once

#include <map>
#include <memory>
#include <tuple>

#include "accelerate/distributed/communicator.h"
#include "distributed/mesh_layout.h"

namespace accelerate::distributed {

class DeviceMesh {
 public:
  // ConfigError (one line) when `shape` does not lay out `job`'s processes.
  DeviceMesh(std::shared_ptr<Communicator> job, MeshShape shape);

  const MeshLayout& layout() const { return layout_; }
  const MeshShape& shape() const { return layout_.shape(); }
  const std::shared_ptr<Communicator>& job() const { return job_; }

  // This process's group along `dims` (MeshLayout::partition).
  std::shared_ptr<Communicator> group(MeshDims dims);
  // This process's run of `size` consecutive members of its `dims` group
  // (MeshLayout::blocks), and the members at its place in every run
  // (MeshLayout::strides). ConfigError when `size` does not divide it.
  std::shared_ptr<Communicator> block(MeshDims dims, int size);
  std::shared_ptr<Communicator> stride(MeshDims dims, int size);

 private:
  enum class Cut { kWhole, kBlock, kStride };
  std::shared_ptr<Communicator> formed(Cut cut, MeshDims dims, int size);

  std::shared_ptr<Communicator> job_;
  MeshLayout layout_;
  std::map<std::tuple<Cut, unsigned, int>, std::shared_ptr<Communicator>> groups_;
};

}  // namespace accelerate::distributed
