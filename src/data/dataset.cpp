#include "accelerate/data/dataset.h"

#include <ATen/ATen.h>

#include "accelerate/common/errors.h"

namespace accelerate {

TensorDataset::TensorDataset(at::Tensor data, at::Tensor targets)
    : data_(std::move(data)), targets_(std::move(targets)) {
  if (!data_.defined() || !targets_.defined() || data_.dim() == 0 || targets_.dim() == 0) {
    throw Error("TensorDataset needs data and targets with at least one dimension");
  }
  if (data_.size(0) != targets_.size(0)) {
    throw Error("TensorDataset: data has " + std::to_string(data_.size(0)) + " rows but targets " +
                std::to_string(targets_.size(0)));
  }
}

Example TensorDataset::get(size_t index) const {
  if (index >= size()) {
    throw Error("TensorDataset: index " + std::to_string(index) + " is out of range for " +
                std::to_string(size()) + " examples");
  }
  const auto i = static_cast<int64_t>(index);
  return {data_[i], targets_[i]};
}

}  // namespace accelerate
