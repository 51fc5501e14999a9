// EpochSteps: the global steps of one epoch (see batch_sharding.h), in order,
// each known to be final or not by looking one step ahead. Over a map-style
// dataset the steps are computed from the epoch's order; over a stream they
// are read, one global batch of examples at a time.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

#include "accelerate/data/batch_sharding.h"
#include "accelerate/detail/data_typed_ops.h"

namespace accelerate {
namespace detail {

class EpochSteps {
 public:
  struct Step {
    size_t index = 0;
    size_t filled = 0;  // real samples, 1..global batch size
    // No step follows. For a lookahead step that is full this is not known
    // yet and reads false; a full step gives every process a batch anyway.
    bool final = false;
    Erased examples;  // streams only: the step's examples
  };

  // Steps over `order`, the dataset indices of the epoch.
  static EpochSteps over_order(LoaderOps& ops, std::vector<size_t> order,
                               const BatchSharding& sharding);
  // Steps read from the (already restarted) stream of an iterable dataset.
  static EpochSteps over_stream(LoaderOps& ops, const BatchSharding& sharding);

  // The next step, or nullopt after the last.
  std::optional<Step> next();
  // The step after the one next() returned last (nullopt if none).
  const std::optional<Step>& following() const { return following_; }
  // Passes over `count` steps without loading them (a stream still reads them).
  void skip(size_t count);
  // Samples at the start of the epoch that padding cycles through.
  size_t start_count() const { return start_count_; }
  // Positions of `step` that `process` takes (empty: none).
  std::vector<size_t> positions(const Step& step, size_t process) const;
  // Work that produces the examples at `positions` of `step`; safe to run on
  // any thread.
  std::function<Erased()> examples(const Step& step, const std::vector<size_t>& positions) const;
  // What gather_for_metrics keeps of the epoch's last global step, given
  // that step (BatchDataLoader::remainder semantics).
  size_t remainder_of_final(const Step& final_step) const;
  const BatchSharding& sharding() const { return sharding_; }

 private:
  EpochSteps(LoaderOps& ops, const BatchSharding& sharding) : ops_(&ops), sharding_(sharding) {}
  std::optional<Step> map_step(size_t index) const;
  std::optional<Step> next_from_stream();

  LoaderOps* ops_;
  BatchSharding sharding_;
  bool stream_ = false;
  std::vector<size_t> order_;  // map-style only
  size_t step_count_ = 0;      // map-style only
  size_t next_index_ = 0;
  size_t start_count_ = 0;
  Erased start_examples_;  // stream only: the first step's examples
  Erased lookahead_;       // stream only: examples of the step after the current one
  bool primed_ = false;
  std::optional<Step> following_;
};

}  // namespace detail
}  // namespace accelerate
