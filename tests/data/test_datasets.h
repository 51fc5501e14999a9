// Small datasets for the DataLoader tests: example i carries i as its target,
// so a batch tells which samples it holds.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "accelerate/data/data_loader.h"

namespace accelerate {
namespace testing {

// Calls and failures shared between a dataset and its copies (the loader
// holds a copy).
struct DatasetProbe {
  std::atomic<size_t> gets{0};
  std::atomic<size_t> in_flight{0};
  std::atomic<size_t> resets{0};
  std::atomic<int64_t> last_epoch{-1};
  std::atomic<int64_t> fail_at{-1};    // get/next of this index throws
  std::atomic<bool> fail_once{false};  // ...only the first time
  std::chrono::microseconds pause{0};  // per example
};

inline Example index_example(size_t index) {
  return {torch::full({2}, static_cast<float>(index)), torch::tensor(static_cast<int64_t>(index))};
}

inline void maybe_fail(DatasetProbe& probe, size_t index) {
  if (probe.fail_at.load() == static_cast<int64_t>(index)) {
    if (probe.fail_once.load()) probe.fail_at = -1;
    throw std::runtime_error("example " + std::to_string(index) + " is broken");
  }
}

// Map-style: example i = (data [i, i], target i).
class IndexDataset {
 public:
  explicit IndexDataset(size_t length, std::shared_ptr<DatasetProbe> probe = nullptr)
      : length_(length), probe_(probe ? probe : std::make_shared<DatasetProbe>()) {}
  size_t size() const { return length_; }
  Example get(size_t index) {
    ++probe_->gets;
    ++probe_->in_flight;
    struct Leave {
      DatasetProbe& probe;
      ~Leave() { --probe.in_flight; }
    } leave{*probe_};
    if (probe_->pause.count() > 0) std::this_thread::sleep_for(probe_->pause);
    maybe_fail(*probe_, index);
    return index_example(index);
  }
  DatasetProbe& probe() { return *probe_; }

 private:
  size_t length_;
  std::shared_ptr<DatasetProbe> probe_;
};

// Iterable: the stream 0..length-1; optionally tells its size.
template <bool kTellsSize = false>
class IndexStream {
 public:
  explicit IndexStream(size_t length, std::shared_ptr<DatasetProbe> probe = nullptr)
      : length_(length), probe_(probe ? probe : std::make_shared<DatasetProbe>()) {}
  std::optional<Example> next() {
    if (cursor_ == length_) return std::nullopt;
    ++probe_->gets;
    maybe_fail(*probe_, cursor_);
    return index_example(cursor_++);
  }
  void reset() {
    cursor_ = 0;
    ++probe_->resets;
  }
  void set_epoch(int64_t epoch) { probe_->last_epoch = epoch; }
  template <bool kTells = kTellsSize, class = std::enable_if_t<kTells>>
  size_t size() const {
    return length_;
  }
  DatasetProbe& probe() { return *probe_; }

 private:
  size_t length_;
  size_t cursor_ = 0;
  std::shared_ptr<DatasetProbe> probe_;
};

inline std::vector<int64_t> targets_of(const Example& batch) {
  auto targets = batch.target.contiguous();
  return std::vector<int64_t>(targets.data_ptr<int64_t>(),
                              targets.data_ptr<int64_t>() + targets.numel());
}

// The targets of a batch LibTorch's way: a vector of examples.
inline std::vector<int64_t> targets_of(const std::vector<Example>& batch) {
  std::vector<int64_t> targets;
  for (const auto& example : batch) targets.push_back(example.target.item<int64_t>());
  return targets;
}

// Every batch of one pass, as lists of targets.
template <class Loader>
std::vector<std::vector<int64_t>> one_pass(Loader& loader) {
  std::vector<std::vector<int64_t>> batches;
  for (auto& batch : loader) batches.push_back(targets_of(batch));
  return batches;
}

inline std::vector<std::vector<int64_t>> as_int64(const std::vector<std::vector<size_t>>& batches) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& batch : batches) out.emplace_back(batch.begin(), batch.end());
  return out;
}

}  // namespace testing
}  // namespace accelerate
