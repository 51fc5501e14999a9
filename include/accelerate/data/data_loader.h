// accelerate::DataLoader: batches from a dataset, sharded between the
// processes of a job the way Hugging Face Accelerate shards them.
//
//   accelerate::DataLoader train(MnistDataset(root),
//   accelerate::DataLoaderOptions(64).shuffle(true)); accelerator.prepare(model, optimizer, train);
//   // shards it, moves batches to the device for (auto& batch : train) { ... batch.data ...
//   batch.target ... }
//
// DataLoaderBase is the type-erased face the Accelerator works with:
// sharding, device placement, epochs, end-of-data tracking, skipping and
// checkpoint positions. DataLoader<Dataset, Collate> adds the typed
// iteration. See docs/data.md for the semantics in full.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "accelerate/data/batch_sharding.h"
#include "accelerate/data/data_collate.h"
#include "accelerate/data/data_options.h"
#include "accelerate/data/dataset.h"
#include "accelerate/detail/data_typed_ops.h"

namespace accelerate {

class Communicator;
class DataLoaderBase;

// Where a loader stands, for checkpoints: restoring it makes the next pass
// continue with batch `batches_yielded` of `epoch`, in the same order.
struct DataLoaderPosition {
  int64_t epoch = 0;
  // Batches of `epoch` already consumed (skipped ones included); 0 between
  // epochs.
  uint64_t batches_yielded = 0;
  uint64_t shuffle_seed = 0;
  bool operator==(const DataLoaderPosition& other) const {
    return epoch == other.epoch && batches_yielded == other.batches_yielded &&
           shuffle_seed == other.shuffle_seed;
  }
};

enum class IterationEvent { kBegin, kEnd };
// Called when a pass over the loader begins, and when it ends (all batches
// seen, the loop left early, or an error).
using IterationObserver = std::function<void(DataLoaderBase& loader, IterationEvent event)>;

namespace detail {
class Pass;
}

class DataLoaderBase {
 public:
  virtual ~DataLoaderBase();
  DataLoaderBase(const DataLoaderBase&) = delete;
  DataLoaderBase& operator=(const DataLoaderBase&) = delete;

  // ---- What Accelerator::prepare sets ----
  // Shards the loader between comm's processes (nullptr: one process) with
  // `config`. A loader never configured behaves as one process. Collective
  // when the job has several processes and the loader shuffles without an
  // explicit seed: process 0's seed is broadcast. Throws ConfigError for
  // split_batches with an indivisible batch size, or dispatch_batches with an
  // example type that has no accelerate::Serializer.
  virtual void configure_sharding(std::shared_ptr<Communicator> comm,
                                  const DataLoaderConfiguration& config);
  // Batches are moved to `device` before they are yielded (non-blocking from
  // pinned memory); nullopt leaves them where collate put them. Throws for a
  // non-CPU device when the batch type has no accelerate::TensorTree.
  virtual void set_device(std::optional<c10::Device> device);
  std::optional<c10::Device> device() const { return device_; }
  const BatchSharding& sharding() const { return sharding_; }
  bool dispatches_batches() const { return dispatch_; }
  const DataLoaderOptions& options() const { return options_; }

  // ---- Epochs and order ----
  // The epoch of the next pass (or of the current one). A completed pass
  // advances it by one; set_epoch overrides it, and drops a pending skip meant
  // for another epoch.
  virtual void set_epoch(int64_t epoch);
  virtual int64_t epoch() const { return epoch_; }
  // The seed the shuffle permutation of epoch e is drawn with (seed + e).
  virtual void set_shuffle_seed(uint64_t seed);
  uint64_t shuffle_seed() const { return seed_; }

  // ---- Sizes and the end of the data ----
  // Batches this process yields in one epoch (skipped ones included). Throws
  // for an iterable dataset without size().
  virtual size_t size() const;
  std::optional<size_t> known_size() const;
  // True while the batch just yielded is the last of the epoch (known one
  // batch ahead, before the loop asks for another).
  virtual bool end_of_dataloader() const { return end_of_dataloader_; }
  // Real samples in the last global batch of the epoch when padding filled it
  // up (gather_for_metrics keeps that many rows of it); 0 when there is
  // nothing to drop (always with drop_last); -1 while not yet known (an
  // iterable dataset before its last batch).
  virtual int64_t remainder() const { return remainder_; }
  bool is_iterating() const { return iterating_; }

  // ---- Resuming ----
  // The next pass of the current epoch starts at batch `count` (the skipped
  // batches are not loaded). Applies to one pass; end_of_dataloader still
  // marks the epoch's true last batch. With dispatch_batches, process 0's
  // skip applies to all.
  virtual void skip_first_batches(size_t count);
  virtual DataLoaderPosition position() const;
  virtual void restore_position(const DataLoaderPosition& position);

  // ---- Observers ----
  // Returns an id for remove_iteration_observer.
  size_t add_iteration_observer(IterationObserver observer);
  void remove_iteration_observer(size_t id);

 protected:
  DataLoaderBase(DataLoaderOptions options, detail::LoaderOps& ops);
  // Starts a pass (abandoning one still running) and loads its first batch.
  std::shared_ptr<detail::Pass> start_pass();
  // Stops the workers of a running pass; derived destructors call it first,
  // before the dataset they read goes away.
  void abandon_active_pass() noexcept;
  static bool pass_at_end(const detail::Pass* pass);
  static void* pass_batch(const detail::Pass& pass);
  static void advance_pass(detail::Pass& pass);

 private:
  friend class detail::Pass;
  void pass_yielded(uint64_t batch_index, bool last, int64_t remainder);
  void pass_ended(bool completed) noexcept;
  void notify(IterationEvent event);
  void require_idle(const char* what) const;

  detail::LoaderOps& ops_;
  DataLoaderOptions options_;
  BatchSharding sharding_;
  std::shared_ptr<Communicator> comm_;
  bool dispatch_ = false;
  std::optional<c10::Device> device_;
  int64_t epoch_ = 0;
  int64_t pass_epoch_ = 0;              // the running pass's epoch
  bool epoch_set_during_pass_ = false;  // then a completed pass keeps it
  uint64_t seed_ = 0;
  bool seed_is_explicit_ = false;
  std::optional<std::pair<int64_t, size_t>> pending_skip_;  // (epoch, batches)
  bool iterating_ = false;
  bool end_of_dataloader_ = false;
  int64_t remainder_ = -1;
  uint64_t batches_yielded_ = 0;
  std::vector<std::pair<size_t, IterationObserver>> observers_;
  size_t next_observer_id_ = 0;
  std::weak_ptr<detail::Pass> active_;
};

// Accelerate's gather_for_metrics, second half: `gathered` (outputs of the
// batch just yielded, gathered from every process in rank order) without the
// duplicates that even_batches padding added to the epoch's last global
// batch. Unchanged before the last batch, or when nothing was padded.
at::Tensor truncate_for_metrics(const at::Tensor& gathered, const DataLoaderBase& loader);

template <class T>
std::vector<T> truncate_for_metrics(std::vector<T> gathered, const DataLoaderBase& loader) {
  const int64_t keep = loader.end_of_dataloader() ? loader.remainder() : 0;
  if (keep > 0 && static_cast<size_t>(keep) < gathered.size()) {
    gathered.erase(gathered.begin() + keep, gathered.end());
  }
  return gathered;
}

namespace detail {
// Batch datasets already yield batches; other kinds stack their examples.
template <class Dataset, DatasetKind Kind = dataset_kind<Dataset>>
struct default_collate {
  using type = DefaultCollate<dataset_example_t<Dataset>>;
};
template <class Dataset>
struct default_collate<Dataset, DatasetKind::kBatch> {
  using type = KeepBatch;
};
template <class Dataset>  // DataLoader's static_assert says what is wrong
struct default_collate<Dataset, DatasetKind::kUnsupported> {
  using type = KeepBatch;
};
}  // namespace detail

template <class Dataset>
using default_collate_t = typename detail::default_collate<Dataset>::type;

template <class Dataset, class Collate = default_collate_t<Dataset>>
class DataLoader : private detail::TypedLoaderOps<Dataset, Collate>,  // built first: the
                   public DataLoaderBase {                            // base keeps a reference
  using Ops = detail::TypedLoaderOps<Dataset, Collate>;

 public:
  using ExampleType = typename Ops::ExampleType;
  using BatchType = typename Ops::BatchType;

  DataLoader(Dataset dataset, DataLoaderOptions options, Collate collate = Collate())
      : Ops(std::move(dataset), std::move(collate)),
        DataLoaderBase(std::move(options), static_cast<detail::LoaderOps&>(*this)) {
    this->set_request_size(this->options().batch_size());
  }
  ~DataLoader() override { abandon_active_pass(); }

  // One pass over the epoch. Move-only: its lifetime is the pass's, and
  // destroying it early (leaving a loop) stops the workers.
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = BatchType;
    using difference_type = std::ptrdiff_t;
    using pointer = BatchType*;
    using reference = BatchType&;

    Iterator() = default;
    Iterator(Iterator&&) noexcept = default;
    Iterator& operator=(Iterator&&) noexcept = default;
    Iterator(const Iterator&) = delete;
    Iterator& operator=(const Iterator&) = delete;

    BatchType& operator*() const { return *static_cast<BatchType*>(pass_batch(*pass_)); }
    BatchType* operator->() const { return &**this; }
    // Loads the next batch; rethrows a worker's exception.
    Iterator& operator++() {
      advance_pass(*pass_);
      return *this;
    }
    // Iterators compare equal when both are at the end of their pass.
    bool operator==(const Iterator& other) const { return at_end() == other.at_end(); }
    bool operator!=(const Iterator& other) const { return !(*this == other); }

   private:
    friend class DataLoader;
    explicit Iterator(std::shared_ptr<detail::Pass> pass) : pass_(std::move(pass)) {}
    bool at_end() const { return pass_at_end(pass_.get()); }
    std::shared_ptr<detail::Pass> pass_;
  };

  Iterator begin() { return Iterator(start_pass()); }
  Iterator end() { return Iterator(); }

  Dataset& dataset() { return this->dataset_; }
  const Dataset& dataset() const { return this->dataset_; }
};

template <class Dataset>
DataLoader(Dataset, DataLoaderOptions) -> DataLoader<Dataset>;
template <class Dataset, class Collate>
DataLoader(Dataset, DataLoaderOptions, Collate) -> DataLoader<Dataset, Collate>;

// A DataLoader held by a pointer, as make_data_loader returns it.
template <class T, class = void>
struct points_to_data_loader : std::false_type {};
template <class T>
struct points_to_data_loader<T, std::void_t<decltype(*std::declval<T&>())>>
    : std::is_base_of<DataLoaderBase, std::decay_t<decltype(*std::declval<T&>())>> {};

// Checkpoints and gather_object carry positions as bytes.
template <>
struct Serializer<DataLoaderPosition> {
  static void write(ByteWriter& out, const DataLoaderPosition& position) {
    out.write_pod(position.epoch);
    out.write_pod(position.batches_yielded);
    out.write_pod(position.shuffle_seed);
  }
  static DataLoaderPosition read(ByteReader& in) {
    DataLoaderPosition position;
    position.epoch = in.read_pod<int64_t>();
    position.batches_yielded = in.read_pod<uint64_t>();
    position.shuffle_seed = in.read_pod<uint64_t>();
    return position;
  }
};

}  // namespace accelerate
