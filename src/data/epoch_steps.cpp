#include "data/epoch_steps.h"

#include <algorithm>
#include <memory>

namespace accelerate {
namespace detail {

EpochSteps EpochSteps::over_order(LoaderOps& ops, std::vector<size_t> order,
                                  const BatchSharding& sharding) {
  EpochSteps steps(ops, sharding);
  steps.step_count_ = global_step_count(order.size(), sharding);
  steps.start_count_ = std::min(order.size(), sharding.global_batch_size());
  steps.order_ = std::move(order);
  return steps;
}

EpochSteps EpochSteps::over_stream(LoaderOps& ops, const BatchSharding& sharding) {
  EpochSteps steps(ops, sharding);
  steps.stream_ = true;
  return steps;
}

std::optional<EpochSteps::Step> EpochSteps::map_step(size_t index) const {
  if (index >= step_count_) return std::nullopt;
  const size_t global = sharding_.global_batch_size();
  Step step;
  step.index = index;
  step.filled = std::min(global, order_.size() - index * global);
  step.final = index + 1 == step_count_;
  return step;
}

std::optional<EpochSteps::Step> EpochSteps::next_from_stream() {
  const size_t global = sharding_.global_batch_size();
  if (!primed_) {
    primed_ = true;
    lookahead_ = ops_->read(global);
    start_examples_ = lookahead_;
    start_count_ = ops_->count(lookahead_);
  }
  const size_t filled = lookahead_ ? ops_->count(lookahead_) : 0;
  if (filled == 0) {
    following_.reset();
    return std::nullopt;
  }
  Step step;
  step.index = next_index_++;
  step.filled = filled;
  step.examples = lookahead_;
  // A short step means the stream ended inside it: nothing more to read.
  lookahead_ = filled == global ? ops_->read(global) : nullptr;
  const size_t ahead = lookahead_ ? ops_->count(lookahead_) : 0;
  step.final = ahead == 0;
  if (step.final) {
    following_.reset();
  } else {
    Step next;
    next.index = step.index + 1;
    next.filled = ahead;
    next.final = ahead < global;
    next.examples = lookahead_;
    following_ = next;
  }
  return step;
}

std::optional<EpochSteps::Step> EpochSteps::next() {
  if (stream_) return next_from_stream();
  auto step = map_step(next_index_);
  if (step) ++next_index_;
  following_ = step ? map_step(next_index_) : std::nullopt;
  return step;
}

void EpochSteps::skip(size_t count) {
  if (!stream_) {
    next_index_ = std::min(step_count_, next_index_ + count);
    following_ = map_step(next_index_);
    return;
  }
  for (size_t i = 0; i < count; ++i) {
    if (!next_from_stream()) return;
  }
}

std::vector<size_t> EpochSteps::positions(const Step& step, size_t process) const {
  return positions_in_step(step.index, step.filled, start_count_, sharding_.for_process(process));
}

std::function<Erased()> EpochSteps::examples(const Step& step,
                                             const std::vector<size_t>& positions) const {
  LoaderOps* ops = ops_;
  if (!stream_) {
    std::vector<size_t> indices;
    indices.reserve(positions.size());
    for (size_t position : positions) indices.push_back(order_[position]);
    return [ops, indices = std::move(indices)] { return ops->fetch(indices); };
  }
  const size_t step_begin = step.index * sharding_.global_batch_size();
  return [ops, step_examples = step.examples, step_begin, start = start_examples_, positions] {
    return ops->select(step_examples, step_begin, start, positions);
  };
}

size_t EpochSteps::remainder_of_final(const Step& final_step) const {
  const bool padded =
      final_step.filled < sharding_.global_batch_size() && sharding_.pads_last_step();
  return padded ? final_step.filled : 0;
}

}  // namespace detail
}  // namespace accelerate
