#include "distributed/shape_exchange.h"

#include <sstream>

#include <ATen/ATen.h>

#include "accelerate/common/errors.h"
#include "accelerate/detail/enum_names.h"

namespace accelerate {
namespace detail {
namespace {

// Wire layout of one report: kind, dtype, ndim, then up to kMaxDims sizes.
constexpr int64_t kMaxDims = 12;
constexpr int64_t kHeader = 3;

at::Tensor encode(CollectiveKind kind, const at::Tensor& tensor) {
  auto wire = at::full({kHeader + kMaxDims}, -1, at::kLong);
  auto* out = wire.data_ptr<int64_t>();
  out[0] = static_cast<int64_t>(kind);
  out[1] = static_cast<int64_t>(tensor.scalar_type());
  out[2] = tensor.dim();
  for (int64_t d = 0; d < std::min<int64_t>(tensor.dim(), kMaxDims); ++d) {
    out[kHeader + d] = tensor.size(d);
  }
  return wire;
}

ShapeReport decode(const at::Tensor& wire) {
  const auto* in = wire.data_ptr<int64_t>();
  ShapeReport report{static_cast<CollectiveKind>(in[0]), static_cast<at::ScalarType>(in[1]), {}};
  for (int64_t d = 0; d < std::min<int64_t>(in[2], kMaxDims); ++d) {
    report.sizes.push_back(in[kHeader + d]);
  }
  return report;
}

bool agree(const ShapeReport& a, const ShapeReport& b, ShapeRule rule, int64_t dim) {
  if (a.kind != b.kind || a.dtype != b.dtype || a.sizes.size() != b.sizes.size()) return false;
  for (size_t d = 0; d < a.sizes.size(); ++d) {
    const bool free_dim = rule == ShapeRule::kAllButDim && static_cast<int64_t>(d) == dim;
    if (!free_dim && a.sizes[d] != b.sizes[d]) return false;
  }
  return true;
}

}  // namespace

const char* to_string(CollectiveKind kind) {
  static constexpr detail::EnumName<CollectiveKind> kCollectiveKindNames[] = {
      {CollectiveKind::kGather, "gather"},
      {CollectiveKind::kReduce, "reduce"},
      {CollectiveKind::kBroadcast, "broadcast"},
      {CollectiveKind::kPad, "pad_across_processes"}};
  static_assert(detail::names_are_distinct(kCollectiveKindNames));
  return detail::enum_name(kCollectiveKindNames, kind, "an unknown collective");
}

std::string ShapeReport::str() const {
  std::ostringstream out;
  out << to_string(kind) << " " << c10::toString(dtype) << "[";
  for (size_t d = 0; d < sizes.size(); ++d) out << (d ? ", " : "") << sizes[d];
  out << "]";
  return out.str();
}

std::vector<ShapeReport> exchange_shapes(Communicator& comm, CollectiveKind kind,
                                         const at::Tensor& tensor, ShapeRule rule, int64_t dim) {
  if (tensor.dim() > kMaxDims) {
    throw Error(std::string(to_string(kind)) + " supports tensors of up to " +
                std::to_string(kMaxDims) + " dimensions, got " + std::to_string(tensor.dim()));
  }
  std::vector<ShapeReport> reports;
  for (const auto& wire : comm.all_gather_same_shape(encode(kind, tensor))) {
    reports.push_back(decode(wire));
  }
  bool consistent = true;
  for (const auto& report : reports)
    consistent = consistent && agree(reports[0], report, rule, dim);
  if (!consistent) {
    std::ostringstream line;
    line << "rank " << comm.rank() << ": ranks disagree on " << to_string(kind)
         << (rule == ShapeRule::kAllButDim
                 ? " (sizes may differ only in dim " + std::to_string(dim) + ")"
                 : "")
         << ":";
    for (size_t r = 0; r < reports.size(); ++r) {
      line << (r ? ";" : "") << " rank " << r << " " << reports[r].str();
    }
    throw DistributedError(line.str());
  }
  return reports;
}

}  // namespace detail
}  // namespace accelerate
