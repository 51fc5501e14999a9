// MeshLayout: the device mesh's arithmetic. Every subset of dimensions
// partitions the job, groups hold the ranks that differ only along them, the
// innermost dimension is consecutive ranks, and the groups the library
// formed by hand before the mesh (sequence-parallel groups of consecutive
// ranks, hybrid sharding's shard and replica groups) are the mesh's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "accelerate/common/errors.h"
#include "distributed/mesh_layout.h"

namespace mesh_layout_test {

using accelerate::ConfigError;
using accelerate::distributed::MeshDim;
using accelerate::distributed::MeshDims;
using accelerate::distributed::MeshLayout;
using accelerate::distributed::MeshShape;
using Groups = std::vector<std::vector<int>>;
using ::testing::HasSubstr;

constexpr MeshDim kDims[] = {MeshDim::kDpReplicate, MeshDim::kDpShard, MeshDim::kSp, MeshDim::kTp};

MeshShape shape_of(int dp_replicate, int dp_shard, int sp, int tp) {
  MeshShape shape;
  shape.dp_replicate = dp_replicate;
  shape.dp_shard = dp_shard;
  shape.sp = sp;
  shape.tp = tp;
  return shape;
}

MeshDims dims_of_bits(unsigned bits) {
  MeshDims dims;
  for (MeshDim dim : kDims) {
    if ((bits >> static_cast<int>(dim)) & 1U) dims = dims.with(dim);
  }
  return dims;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "(no ConfigError)";
}

TEST(MeshLayout, EverySetOfDimensionsPartitionsTheJobAlongThoseDimensions) {
  for (const MeshShape& shape :
       {shape_of(2, 3, 2, 1), shape_of(1, 2, 2, 2), shape_of(3, 1, 1, 2), shape_of(2, 2, 2, 2)}) {
    const int world = static_cast<int>(shape.world());
    const MeshLayout layout(shape, world);
    for (unsigned bits = 0; bits < 16; ++bits) {
      const MeshDims dims = dims_of_bits(bits);
      SCOPED_TRACE(shape.describe() + ", groups along " + dims.describe());
      const Groups groups = layout.partition(dims);
      std::set<int> seen;
      int previous_first = -1;
      for (const std::vector<int>& group : groups) {
        ASSERT_EQ(static_cast<std::int64_t>(group.size()), shape.size(dims));
        EXPECT_GT(group.front(), previous_first);  // groups in the order of their first rank
        previous_first = group.front();
        for (std::size_t i = 0; i < group.size(); ++i) {
          EXPECT_TRUE(seen.insert(group[i]).second) << "rank " << group[i] << " twice";
          if (i > 0) EXPECT_LT(group[i - 1], group[i]);
          // Members agree on every coordinate outside `dims`.
          for (MeshDim dim : kDims) {
            if (!dims.contains(dim))
              EXPECT_EQ(layout.coordinate(group[i], dim), layout.coordinate(group[0], dim));
          }
        }
      }
      EXPECT_EQ(static_cast<int>(seen.size()), world);
    }
  }
}

TEST(MeshLayout, RanksAreRowMajorWithTensorParallelismInnermost) {
  const MeshLayout layout(shape_of(2, 2, 2, 2), 16);
  for (int rank = 0; rank < 16; ++rank) {
    EXPECT_EQ(layout.coordinate(rank, MeshDim::kTp), rank % 2);
    EXPECT_EQ(layout.coordinate(rank, MeshDim::kSp), rank / 2 % 2);
    EXPECT_EQ(layout.coordinate(rank, MeshDim::kDpShard), rank / 4 % 2);
    EXPECT_EQ(layout.coordinate(rank, MeshDim::kDpReplicate), rank / 8);
  }
  EXPECT_EQ(layout.partition({MeshDim::kTp}).front(), (std::vector<int>{0, 1}));
  EXPECT_EQ(layout.partition({MeshDim::kDpReplicate}).front(), (std::vector<int>{0, 8}));
}

// The groups the Accelerator and the sharded engine formed by hand before
// the mesh: the same members, in the same order.
TEST(MeshLayout, SequenceAndHybridGroupsAreTheHandFormedOnes) {
  for (int world : {4, 8, 12}) {
    for (int sp : {1, 2, 4}) {
      if (world % sp != 0) continue;
      const MeshLayout layout(shape_of(world / sp, 1, sp, 1), world);
      Groups sequence(static_cast<std::size_t>(world / sp)), data(static_cast<std::size_t>(sp));
      for (int rank = 0; rank < world; ++rank) {
        sequence[static_cast<std::size_t>(rank / sp)].push_back(rank);
        data[static_cast<std::size_t>(rank % sp)].push_back(rank);
      }
      EXPECT_EQ(layout.partition({MeshDim::kSp}), sequence);
      EXPECT_EQ(layout.partition({MeshDim::kDpReplicate, MeshDim::kDpShard}), data);
    }
    for (int shard_size : {2, 4}) {
      const MeshLayout layout(shape_of(world / shard_size, shard_size, 1, 1), world);
      Groups shards(static_cast<std::size_t>(world / shard_size));
      Groups replicas(static_cast<std::size_t>(shard_size));
      for (int rank = 0; rank < world; ++rank) {
        shards[static_cast<std::size_t>(rank / shard_size)].push_back(rank);
        replicas[static_cast<std::size_t>(rank % shard_size)].push_back(rank);
      }
      EXPECT_EQ(layout.partition({MeshDim::kDpShard, MeshDim::kSp}), shards);
      EXPECT_EQ(layout.partition({MeshDim::kDpReplicate}), replicas);
    }
  }
}

TEST(MeshLayout, BlocksAndStridesCutEachGroup) {
  const MeshLayout layout(shape_of(2, 4, 1, 1), 8);
  const MeshDims shard{MeshDim::kDpShard, MeshDim::kSp};
  EXPECT_EQ(layout.blocks(shard, 2), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(layout.strides(shard, 2), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(layout.blocks(MeshDims::all(), 4), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(layout.strides(MeshDims::all(), 4), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_THAT(error_of([&] { layout.blocks(shard, 3); }),
              HasSubstr("groups of 3 processes do not divide the dp_shard x sp groups of 4"));
  EXPECT_THAT(error_of([&] { layout.strides(shard, 0); }), HasSubstr("groups of 0 processes"));
}

TEST(MeshLayout, ASizeBelowOneOrAProductOtherThanTheJobIsOneLine) {
  EXPECT_EQ(error_of([] { MeshLayout(shape_of(2, 2, 1, 1), 8); }),
            "device mesh: dp_replicate 2 x dp_shard 2 x sp 1 x tp 1 is 4 processes, but the job "
            "has 8");
  EXPECT_EQ(error_of([] { MeshLayout(shape_of(2, 0, 1, 1), 0); }),
            "device mesh: dp_shard size 0 is below 1 (dp_replicate 2 x dp_shard 0 x sp 1 x tp 1)");
}

TEST(MeshLayout, DimensionsDescribeThemselvesOutermostFirst) {
  EXPECT_EQ((MeshDims{MeshDim::kTp, MeshDim::kDpReplicate}).describe(), "dp_replicate x tp");
  EXPECT_EQ(MeshDims().describe(), "none");
  EXPECT_EQ(MeshDims::all().describe(), "dp_replicate x dp_shard x sp x tp");
}

}  // namespace mesh_layout_test
