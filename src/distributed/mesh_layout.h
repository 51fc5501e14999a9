// MeshLayout: where each process of a job sits on its device mesh, and which
// processes each process group along a set of the mesh's dimensions holds.
// Arithmetic only: DeviceMesh (distributed/device_mesh.h) forms the groups
// from these lists, and the launcher can judge a layout before any process
// starts. LibTorch-free.
//
// The dimensions, outermost first (docs/building.md, "The device mesh"):
//
//   dp_replicate  whole replicas of the model (HSDP's replica groups)
//   dp_shard      ZeRO / FSDP shards of the model
//   sp            Ulysses sequence parallelism (a sequence split over sp ranks)
//   tp            tensor parallelism (room for it; its size is 1 until it lands)
//
// A rank's coordinates are its row-major index over the sizes, the innermost
// dimension fastest: the ranks of one tp group are consecutive, so they
// share a machine (launchers number a machine's processes consecutively);
// the dimensions that talk least, and in the largest messages, span machines.
// torchtitan and Accelerate 1.x order their meshes the same way.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace accelerate::distributed {

enum class MeshDim { kDpReplicate, kDpShard, kSp, kTp };
constexpr int kMeshDimCount = 4;

// "dp_replicate", "dp_shard", "sp", "tp": Accelerate's ParallelismConfig words.
const char* to_string(MeshDim dim);

// A set of the mesh's dimensions (the ones a group spans).
class MeshDims {
 public:
  constexpr MeshDims() = default;
  constexpr MeshDims(std::initializer_list<MeshDim> dims) {
    for (MeshDim dim : dims) bits_ |= 1U << static_cast<int>(dim);
  }
  static constexpr MeshDims all() {
    return {MeshDim::kDpReplicate, MeshDim::kDpShard, MeshDim::kSp, MeshDim::kTp};
  }
  constexpr MeshDims with(MeshDim dim) const {
    MeshDims more = *this;
    more.bits_ |= 1U << static_cast<int>(dim);
    return more;
  }
  constexpr bool contains(MeshDim dim) const { return (bits_ >> static_cast<int>(dim)) & 1U; }
  constexpr unsigned bits() const { return bits_; }
  // "dp_shard x sp", outermost first; "none" for the empty set.
  std::string describe() const;

 private:
  unsigned bits_ = 0;
};

// The groups the data-parallel engines work over:
// the processes that read different batches (the ranks of a sequence- or
// tensor-parallel group read the same ones),
inline constexpr MeshDims kBatchDims{MeshDim::kDpReplicate, MeshDim::kDpShard};
// the processes that hold the same parameters, whose gradients are averaged
// (a sequence-parallel group's ranks hold the whole model; tensor-parallel
// ranks hold different pieces),
inline constexpr MeshDims kReplicaDims{MeshDim::kDpReplicate, MeshDim::kDpShard, MeshDim::kSp};
// and the processes ZeRO / FSDP shard those parameters over (hybrid
// sharding replicates the shards over dp_replicate).
inline constexpr MeshDims kShardDims{MeshDim::kDpShard, MeshDim::kSp};

struct MeshShape {
  int dp_replicate = 1;
  int dp_shard = 1;
  int sp = 1;
  int tp = 1;

  int size(MeshDim dim) const;
  int& size(MeshDim dim);
  // The product of the sizes of `dims`.
  std::int64_t size(MeshDims dims) const;
  std::int64_t world() const { return size(MeshDims::all()); }
  // "dp_replicate 2 x dp_shard 2 x sp 1 x tp 1".
  std::string describe() const;
};

class MeshLayout {
 public:
  // ConfigError (one line naming every size and the job's) when a size is
  // below 1 or the sizes' product is not `world_size`.
  MeshLayout(MeshShape shape, int world_size);

  const MeshShape& shape() const { return shape_; }
  int world_size() const { return world_size_; }
  // `rank`'s index along `dim` (0 .. size(dim) - 1).
  int coordinate(int rank, MeshDim dim) const;

  // The job's ranks in groups along `dims`: each group holds the ranks whose
  // coordinates differ only in `dims`, in rank order; the groups are in the
  // order of their first rank. Every rank is in exactly one group.
  std::vector<std::vector<int>> partition(MeshDims dims) const;
  // Each group of partition(dims) cut into runs of `size` consecutive
  // members (ZeRO++'s hpZ secondary groups, a machine's processes).
  // ConfigError when `size` does not divide the groups.
  std::vector<std::vector<int>> blocks(MeshDims dims, int size) const;
  // The complement of blocks(): within each group of partition(dims), the
  // members at the same place of every block (the same local rank on every
  // machine, for qgZ's second level).
  std::vector<std::vector<int>> strides(MeshDims dims, int size) const;

 private:
  // partition(dims), after checking that `size` divides every group.
  std::vector<std::vector<int>> groups_cut_by(MeshDims dims, int size) const;

  MeshShape shape_;
  int world_size_;
  std::array<int, kMeshDimCount> stride_{};  // ranks between neighbours along each dim
};

}  // namespace accelerate::distributed
