#include "distributed/mesh_layout.h"

#include <map>

#include "accelerate/common/errors.h"
#include "accelerate/detail/enum_names.h"

namespace accelerate::distributed {
namespace {

// Outermost first: the order of the coordinates and of every description.
constexpr MeshDim kOutermostFirst[] = {MeshDim::kDpReplicate, MeshDim::kDpShard, MeshDim::kSp,
                                       MeshDim::kTp};
static_assert(sizeof(kOutermostFirst) / sizeof(kOutermostFirst[0]) == kMeshDimCount);

constexpr detail::EnumName<MeshDim> kMeshDimNames[] = {{MeshDim::kDpReplicate, "dp_replicate"},
                                                       {MeshDim::kDpShard, "dp_shard"},
                                                       {MeshDim::kSp, "sp"},
                                                       {MeshDim::kTp, "tp"}};
static_assert(detail::names_are_distinct(kMeshDimNames));

std::size_t index_of(MeshDim dim) { return static_cast<std::size_t>(dim); }

}  // namespace

const char* to_string(MeshDim dim) { return detail::enum_name(kMeshDimNames, dim, "?"); }

std::string MeshDims::describe() const {
  std::string text;
  for (MeshDim dim : kOutermostFirst) {
    if (contains(dim)) text += (text.empty() ? "" : " x ") + std::string(to_string(dim));
  }
  return text.empty() ? "none" : text;
}

namespace {

// The size field of `shape` for `dim`: const for a const shape, so that
// both overloads of MeshShape::size share one switch.
template <class Shape>
auto& size_field(Shape& shape, MeshDim dim) {
  switch (dim) {
    case MeshDim::kDpReplicate:
      return shape.dp_replicate;
    case MeshDim::kDpShard:
      return shape.dp_shard;
    case MeshDim::kSp:
      return shape.sp;
    case MeshDim::kTp:
      break;
  }
  return shape.tp;
}

}  // namespace

int MeshShape::size(MeshDim dim) const { return size_field(*this, dim); }

int& MeshShape::size(MeshDim dim) { return size_field(*this, dim); }

std::int64_t MeshShape::size(MeshDims dims) const {
  std::int64_t product = 1;
  for (MeshDim dim : kOutermostFirst) {
    if (dims.contains(dim)) product *= size(dim);
  }
  return product;
}

std::string MeshShape::describe() const {
  std::string text;
  for (MeshDim dim : kOutermostFirst) {
    text +=
        (text.empty() ? "" : " x ") + std::string(to_string(dim)) + " " + std::to_string(size(dim));
  }
  return text;
}

MeshLayout::MeshLayout(MeshShape shape, int world_size) : shape_(shape), world_size_(world_size) {
  for (MeshDim dim : kOutermostFirst) {
    if (shape_.size(dim) < 1) {
      throw ConfigError("device mesh: " + std::string(to_string(dim)) + " size " +
                        std::to_string(shape_.size(dim)) + " is below 1 (" + shape_.describe() +
                        ")");
    }
  }
  if (shape_.world() != world_size) {
    throw ConfigError("device mesh: " + shape_.describe() + " is " +
                      std::to_string(shape_.world()) + " processes, but the job has " +
                      std::to_string(world_size));
  }
  int stride = 1;
  for (auto dim = std::rbegin(kOutermostFirst); dim != std::rend(kOutermostFirst); ++dim) {
    stride_[index_of(*dim)] = stride;
    stride *= shape_.size(*dim);
  }
}

int MeshLayout::coordinate(int rank, MeshDim dim) const {
  return rank / stride_[index_of(dim)] % shape_.size(dim);
}

std::vector<std::vector<int>> MeshLayout::partition(MeshDims dims) const {
  // A group is named by the coordinates outside `dims`, which its members share.
  std::map<std::vector<int>, std::size_t> group_of;
  std::vector<std::vector<int>> groups;
  for (int rank = 0; rank < world_size_; ++rank) {
    std::vector<int> outside;
    for (MeshDim dim : kOutermostFirst) {
      if (!dims.contains(dim)) outside.push_back(coordinate(rank, dim));
    }
    const auto [place, added] = group_of.emplace(std::move(outside), groups.size());
    if (added) groups.emplace_back();
    groups[place->second].push_back(rank);
  }
  return groups;
}

std::vector<std::vector<int>> MeshLayout::groups_cut_by(MeshDims dims, int size) const {
  std::vector<std::vector<int>> groups = partition(dims);
  for (const std::vector<int>& group : groups) {
    if (size < 1 || static_cast<int>(group.size()) % size != 0) {
      throw ConfigError("device mesh: groups of " + std::to_string(size) +
                        " processes do not divide the " + dims.describe() + " groups of " +
                        std::to_string(group.size()) + " (" + shape_.describe() + ")");
    }
  }
  return groups;
}

std::vector<std::vector<int>> MeshLayout::blocks(MeshDims dims, int size) const {
  std::vector<std::vector<int>> result;
  for (const std::vector<int>& group : groups_cut_by(dims, size)) {
    for (auto start = group.begin(); start != group.end(); start += size)
      result.emplace_back(start, start + size);
  }
  return result;
}

std::vector<std::vector<int>> MeshLayout::strides(MeshDims dims, int size) const {
  std::vector<std::vector<int>> result;
  for (const std::vector<int>& group : groups_cut_by(dims, size)) {
    for (std::size_t offset = 0; offset < static_cast<std::size_t>(size); ++offset) {
      std::vector<int> same_place;
      for (std::size_t at = offset; at < group.size(); at += static_cast<std::size_t>(size))
        same_place.push_back(group[at]);
      result.push_back(std::move(same_place));
    }
  }
  return result;
}

}  // namespace accelerate::distributed
