// One pass over a DataLoader: where its batches come from (local loading or
// dispatch from process 0), with the workers that load them, and what the
// loader learns from each batch. Lives as long as the Iterator that drives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include <c10/core/Device.h>

#include "accelerate/data/batch_sharding.h"
#include "accelerate/detail/data_typed_ops.h"
#include "data/epoch_steps.h"

namespace accelerate {
class Communicator;
class DataLoaderBase;

namespace detail {

// A batch for this process and what it tells the loader.
struct Delivery {
  Erased batch;
  uint64_t index = 0;      // the batch's place in the epoch
  bool last = false;       // this process gets no later batch this epoch
  int64_t remainder = -1;  // BatchDataLoader::remainder once known, else -1
};

// Everything a pass needs, fixed when it starts.
struct PassPlan {
  LoaderOps* ops = nullptr;
  BatchSharding sharding;
  std::shared_ptr<Communicator> comm;
  bool dispatch = false;
  bool shuffle = false;
  uint64_t seed = 0;
  int64_t epoch = 0;
  size_t skip = 0;
  size_t num_workers = 0;
  size_t prefetch_factor = 2;
  std::chrono::milliseconds timeout{0};  // 0: none
  bool pin_memory = false;
  std::optional<c10::Device> device;
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // This process's next batch, or nullopt after its last.
  virtual std::optional<Delivery> next() = 0;
};

// Restarts the dataset for the plan's epoch and lists its steps.
EpochSteps open_epoch(const PassPlan& plan);
// Every process loads its own batches.
std::unique_ptr<BatchSource> make_local_source(const PassPlan& plan);
// Process 0 loads every process's batches and sends them (dispatch_source.cpp).
std::unique_ptr<BatchSource> make_dispatch_source(const PassPlan& plan);

class Pass {
 public:
  // Starts loading; the first batch arrives with the first advance().
  Pass(DataLoaderBase& loader, PassPlan plan);
  ~Pass();
  Pass(const Pass&) = delete;
  Pass& operator=(const Pass&) = delete;

  // Makes the next batch current, or ends the pass. Rethrows a loading
  // error, after which the pass has ended.
  void advance();
  bool at_end() const { return ended_; }
  void* batch() const { return current_.get(); }
  // Ends the pass early (a new pass started, or the loader is going away).
  void abandon() noexcept { end(false); }

 private:
  void end(bool completed) noexcept;

  DataLoaderBase* loader_;
  PassPlan plan_;
  std::unique_ptr<BatchSource> source_;
  Erased current_;
  bool ended_ = false;
};

}  // namespace detail
}  // namespace accelerate
