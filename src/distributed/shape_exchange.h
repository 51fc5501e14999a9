// Ranks telling each other what they are about to send. Gather and pad need
// every rank's sizes anyway; in debug mode reduce and broadcast exchange them
// too, so that ranks calling a collective with different shapes get an error
// listing every rank's shape instead of a hang or garbage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "accelerate/distributed/communicator.h"

namespace accelerate {
namespace detail {

enum class CollectiveKind : int64_t { kGather = 1, kReduce, kBroadcast, kPad };
const char* to_string(CollectiveKind kind);

struct ShapeReport {
  CollectiveKind kind;
  at::ScalarType dtype;
  std::vector<int64_t> sizes;
  std::string str() const;  // "gather float[3, 4]"
};

// What must agree across ranks.
enum class ShapeRule {
  kIdentical,  // reduce, broadcast: same dtype and sizes
  kAllButDim,  // gather / pad along `dim`: same dtype and rank, other sizes equal
};

// One fixed-size all-gather of every rank's report (so it cannot itself hang
// on a mismatch), then a check; throws DistributedError naming each rank's
// shape when the rule is broken.
std::vector<ShapeReport> exchange_shapes(Communicator& comm, CollectiveKind kind,
                                         const at::Tensor& tensor, ShapeRule rule, int64_t dim = 0);

}  // namespace detail
}  // namespace accelerate
