#include "distributed/device_mesh.h"

namespace accelerate::distributed {

DeviceMesh::DeviceMesh(std::shared_ptr<Communicator> job, MeshShape shape)
    : job_(std::move(job)), layout_(shape, job_->world_size()) {}

std::shared_ptr<Communicator> DeviceMesh::group(MeshDims dims) {
  return formed(Cut::kWhole, dims, 0);
}

std::shared_ptr<Communicator> DeviceMesh::block(MeshDims dims, int size) {
  return formed(Cut::kBlock, dims, size);
}

std::shared_ptr<Communicator> DeviceMesh::stride(MeshDims dims, int size) {
  return formed(Cut::kStride, dims, size);
}

std::shared_ptr<Communicator> DeviceMesh::formed(Cut cut, MeshDims dims, int size) {
  const auto key = std::make_tuple(cut, dims.bits(), size);
  if (auto known = groups_.find(key); known != groups_.end()) return known->second;
  const std::vector<std::vector<int>> partition = cut == Cut::kWhole ? layout_.partition(dims)
                                                  : cut == Cut::kBlock
                                                      ? layout_.blocks(dims, size)
                                                      : layout_.strides(dims, size);
  // One group of every process is the job itself. The others are named
  // for the dimensions they span ("dp_shard x sp group #2 (ranks 0, 2)"),
  // and a run of them for its cut.
  const std::string purpose =
      dims.describe() + (cut == Cut::kBlock    ? " block of " + std::to_string(size)
                         : cut == Cut::kStride ? " stride of " + std::to_string(size)
                                               : "");
  std::shared_ptr<Communicator> mine =
      partition.size() == 1 ? job_ : job_->split(partition, purpose);
  groups_.emplace(key, mine);
  return mine;
}

}  // namespace accelerate::distributed
