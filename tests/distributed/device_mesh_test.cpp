// DeviceMesh over four thread ranks: the groups it forms hold the ranks its
// layout names, each is formed once and then handed out again, a group of
// every process is the job's own communicator, and collectives in a mesh
// group reach its members only.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "accelerate/common/errors.h"
#include "distributed/device_mesh.h"
#include "support/thread_ranks.h"

namespace device_mesh_test {

using accelerate::Communicator;
using accelerate::ConfigError;
using accelerate::distributed::DeviceMesh;
using accelerate::distributed::MeshDim;
using accelerate::distributed::MeshDims;
using accelerate::distributed::MeshShape;

// The job's ranks of `group`'s members, in the group's order.
std::vector<int> members(const Communicator& group) {
  std::vector<int> ranks;
  for (int rank = 0; rank < group.world_size(); ++rank) ranks.push_back(group.job_rank(rank));
  return ranks;
}

MeshShape two_by_two(MeshDim outer, MeshDim inner) {
  MeshShape shape;
  shape.size(outer) = 2;
  shape.size(inner) = 2;
  return shape;
}

TEST(DeviceMesh, FormsEachGroupOnceWithTheLayoutsMembers) {
  accelerate::testing::run_rank_communicators(4, [](std::shared_ptr<Communicator> job) {
    const int me = job->rank();
    DeviceMesh mesh(job, two_by_two(MeshDim::kDpReplicate, MeshDim::kSp));
    const auto sequence = mesh.group({MeshDim::kSp});
    const auto replicas = mesh.group({MeshDim::kDpReplicate, MeshDim::kDpShard});
    EXPECT_EQ(members(*sequence), (std::vector<int>{me / 2 * 2, me / 2 * 2 + 1}));
    EXPECT_EQ(members(*replicas), (std::vector<int>{me % 2, me % 2 + 2}));
    // Asked again: the same communicator, nothing formed (a new group would
    // be collective, and only this process asks).
    EXPECT_EQ(mesh.group({MeshDim::kSp}), sequence);
    EXPECT_EQ(mesh.group({MeshDim::kDpShard, MeshDim::kDpReplicate}), replicas);
    // Every process in one group: the job itself.
    EXPECT_EQ(mesh.group(MeshDims::all()), job);
    EXPECT_EQ(mesh.group({MeshDim::kDpReplicate, MeshDim::kSp}), job);
    // A collective in a mesh group sums its members only.
    at::Tensor value = torch::full({1}, static_cast<float>(me + 1));
    sequence->all_reduce(value, accelerate::ReduceOp::kSum);
    EXPECT_EQ(value.item<float>(), static_cast<float>(2 * (me / 2 * 2) + 3));
    // The groups are named for the dimensions they span, in traffic() and
    // in failure reports alike (numbered as formed: a partition's groups in
    // its order, on every process).
    std::vector<std::string> labels;
    for (const auto& group : job->traffic()) labels.push_back(group.group);
    const std::string first = std::to_string(me / 2 * 2), second = std::to_string(me % 2);
    EXPECT_EQ(labels, (std::vector<std::string>{
                          "job",
                          "sp group #" + std::to_string(1 + me / 2) + " (ranks " + first + ", " +
                              std::to_string(me / 2 * 2 + 1) + ")",
                          "dp_replicate x dp_shard group #" + std::to_string(3 + me % 2) +
                              " (ranks " + second + ", " + std::to_string(me % 2 + 2) + ")"}));
  });
}

TEST(DeviceMesh, BlocksAndStridesOfAGroup) {
  accelerate::testing::run_rank_communicators(4, [](std::shared_ptr<Communicator> job) {
    const int me = job->rank();
    MeshShape shape;
    shape.dp_shard = 4;
    DeviceMesh mesh(job, shape);
    const auto block = mesh.block(MeshDims::all(), 2);
    const auto stride = mesh.stride(MeshDims::all(), 2);
    EXPECT_EQ(members(*block), (std::vector<int>{me / 2 * 2, me / 2 * 2 + 1}));
    EXPECT_EQ(members(*stride), (std::vector<int>{me % 2, me % 2 + 2}));
    EXPECT_EQ(mesh.block(MeshDims::all(), 2), block);
    EXPECT_EQ(mesh.block(MeshDims::all(), 4), job);
    const auto traffic = job->traffic();
    ASSERT_EQ(traffic.size(), 3u);
    EXPECT_EQ(traffic[1].group.rfind("dp_replicate x dp_shard x sp x tp block of 2 group #", 0), 0u)
        << traffic[1].group;
    EXPECT_EQ(traffic[2].group.rfind("dp_replicate x dp_shard x sp x tp stride of 2 group #", 0),
              0u)
        << traffic[2].group;
  });
}

TEST(DeviceMesh, AShapeThatDoesNotLayOutTheJobIsRefusedBeforeAnyGroup) {
  accelerate::testing::run_rank_communicators(2, [](std::shared_ptr<Communicator> job) {
    MeshShape shape;
    shape.sp = 4;
    try {
      DeviceMesh mesh(job, shape);
      ADD_FAILURE() << "no ConfigError";
    } catch (const ConfigError& error) {
      EXPECT_STREQ(error.what(),
                   "device mesh: dp_replicate 1 x dp_shard 1 x sp 4 x tp 1 is 4 processes, but "
                   "the job has 2");
    }
  });
}

}  // namespace device_mesh_test
