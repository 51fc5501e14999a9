// Internal to DataLoader: the few things the library's loading logic (which
// knows neither the example nor the batch type) needs done with the user's
// types. DataLoader<Dataset, Collate> implements them through
// TypedLoaderOps; everything else lives in the library's sources.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Type.h>
#include <torch/data/example.h>

#include "accelerate/common/errors.h"
#include "accelerate/data/data_collate.h"
#include "accelerate/data/data_transfer.h"
#include "accelerate/data/dataset.h"
#include "accelerate/distributed/object_serializer.h"

namespace accelerate {
namespace detail {

// An example list (std::vector<ExampleType>) or a batch, type-erased.
using Erased = std::shared_ptr<void>;

class LoaderOps {
 public:
  virtual ~LoaderOps() = default;

  // ---- The dataset ----
  virtual bool is_iterable() const = 0;
  virtual std::optional<size_t> length() const = 0;
  // Map-style: the examples at these indices. Called from any worker thread.
  virtual Erased fetch(const std::vector<size_t>& indices) = 0;
  // Iterable: rewind for `epoch`.
  virtual void restart_stream(int64_t epoch) = 0;
  // Iterable: up to `count` next examples (fewer at the end of the stream).
  // One thread at a time.
  virtual Erased read(size_t count) = 0;

  // ---- Example lists ----
  virtual size_t count(const Erased& examples) const = 0;
  // Examples by position in the epoch: a position at or after `step_begin` is
  // in `step` (the examples of one global step), an earlier one in `start`
  // (the examples of the epoch's first step).
  virtual Erased select(const Erased& step, size_t step_begin, const Erased& start,
                        const std::vector<size_t>& positions) const = 0;
  // Whether example lists can travel between processes, and how.
  virtual bool examples_serializable() const = 0;
  virtual std::string example_type_name() const = 0;
  virtual std::string serialize(const Erased& examples) const = 0;
  virtual Erased deserialize(const std::string& bytes) const = 0;

  // ---- Batches ----
  // Collates (consuming the list) and pins when asked.
  virtual Erased collate(const Erased& examples, bool pin) = 0;
  virtual bool batches_movable() const = 0;
  virtual std::string batch_type_name() const = 0;
  virtual void move_batch(Erased& batch, const c10::Device& device, bool non_blocking) const = 0;
};

// Whether accelerate::Serializer can write T (containers ask their elements).
template <class T>
struct is_serializable : is_complete<Serializer<T>> {};
template <class T>
struct is_serializable<std::vector<T>> : is_serializable<T> {};
template <class T>
struct is_serializable<std::optional<T>> : is_serializable<T> {};
template <class A, class B>
struct is_serializable<std::pair<A, B>>
    : std::integral_constant<bool, is_serializable<A>::value && is_serializable<B>::value> {};
template <class K, class V>
struct is_serializable<std::map<K, V>>
    : std::integral_constant<bool, is_serializable<K>::value && is_serializable<V>::value> {};
template <class Data, class Target>
struct is_serializable<torch::data::Example<Data, Target>>
    : std::integral_constant<bool, is_serializable<Data>::value && is_serializable<Target>::value> {
};
template <class Data>
struct is_serializable<torch::data::Example<Data, torch::data::example::NoTarget>>
    : is_serializable<Data> {};

template <class Dataset, class Collate>
class TypedLoaderOps : public LoaderOps {
  static constexpr DatasetKind kKind = dataset_kind<Dataset>;
  static_assert(kKind != DatasetKind::kUnsupported,
                "accelerate::DataLoader cannot read this type: a dataset needs get(index) and "
                "size() (map-style), get_batch(indices) and size() (a LibTorch BatchDataset, e.g. "
                "a .map(...) chain), get_batch(count) and reset() (a LibTorch StatefulDataset), or "
                "next() and reset() (iterable); see accelerate/data/dataset.h");

 public:
  using ExampleType = dataset_example_t<Dataset>;
  // What one load yields: the examples of a batch, or a batch dataset's batch.
  using Unit = dataset_load_unit_t<Dataset>;
  using BatchType = std::decay_t<std::invoke_result_t<Collate&, Unit>>;

  TypedLoaderOps(Dataset dataset, Collate collate)
      : dataset_(std::move(dataset)), collate_(std::move(collate)) {}

  bool is_iterable() const override {
    return kKind == DatasetKind::kIterable || kKind == DatasetKind::kStateful;
  }
  std::optional<size_t> length() const override { return dataset_length(dataset_); }

  Erased fetch(const std::vector<size_t>& indices) override {
    if constexpr (kKind == DatasetKind::kBatch) {
      return std::make_shared<Unit>(dataset_.get_batch(c10::ArrayRef<size_t>(indices)));
    } else {
      auto examples = std::make_shared<Unit>();
      if constexpr (kKind == DatasetKind::kMapStyle) {
        examples->reserve(indices.size());
        for (size_t index : indices) examples->push_back(dataset_.get(index));
      }
      return examples;
    }
  }

  void restart_stream(int64_t epoch) override {
    if constexpr (kKind == DatasetKind::kIterable || kKind == DatasetKind::kStateful) {
      if constexpr (has_set_epoch<Dataset>::value) dataset_.set_epoch(epoch);
      dataset_.reset();
      pending_.clear();
    }
    (void)epoch;
  }

  Erased read(size_t count) override {
    auto examples = std::make_shared<Unit>();
    if constexpr (kKind == DatasetKind::kIterable) {
      examples->reserve(count);
      while (examples->size() < count) {
        auto example = dataset_.next();
        if (!example) break;
        examples->push_back(std::move(*example));
      }
    } else if constexpr (kKind == DatasetKind::kStateful) {
      examples->reserve(count);
      while (examples->size() < count) {
        if (pending_.empty()) {
          // The loader's batch size, which a ChunkDataset must have been
          // made with (it accepts no other count).
          auto batch = dataset_.get_batch(request_size_);
          if (!batch) break;
          split_rows(std::move(*batch), pending_);
          if (pending_.empty()) break;
        }
        examples->push_back(std::move(pending_.front()));
        pending_.pop_front();
      }
    }
    return examples;
  }

  size_t count(const Erased& examples) const override {
    if constexpr (kKind == DatasetKind::kBatch) {
      throw Error("DataLoader: internal: count() of a batch dataset's batch");
    } else {
      return list(examples).size();
    }
  }

  Erased select(const Erased& step, size_t step_begin, const Erased& start,
                const std::vector<size_t>& positions) const override {
    if constexpr (kKind == DatasetKind::kBatch) {
      throw Error("DataLoader: internal: select() from a batch dataset's batch");
    } else {
      const Unit& step_examples = list(step);
      const Unit& start_examples = list(start);
      auto chosen = std::make_shared<Unit>();
      chosen->reserve(positions.size());
      for (size_t position : positions) {
        chosen->push_back(position >= step_begin ? step_examples.at(position - step_begin)
                                                 : start_examples.at(position));
      }
      return chosen;
    }
  }

  bool examples_serializable() const override { return is_serializable<Unit>::value; }
  std::string example_type_name() const override { return c10::demangle_type<Unit>(); }
  std::string serialize(const Erased& examples) const override {
    if constexpr (is_serializable<Unit>::value) {
      return accelerate::serialize(list(examples));
    } else {
      throw Error("no accelerate::Serializer for " + example_type_name());
    }
  }
  Erased deserialize(const std::string& bytes) const override {
    if constexpr (is_serializable<Unit>::value) {
      return std::make_shared<Unit>(accelerate::deserialize<Unit>(bytes));
    } else {
      throw Error("no accelerate::Serializer for " + example_type_name());
    }
  }

  Erased collate(const Erased& examples, bool pin) override {
    auto batch =
        std::make_shared<BatchType>(collate_(std::move(*static_cast<Unit*>(examples.get()))));
    if constexpr (accelerate::has_tensor_tree<BatchType>) {
      if (pin) *batch = pin_memory(*batch);
    }
    return batch;
  }
  bool batches_movable() const override { return accelerate::has_tensor_tree<BatchType>; }
  std::string batch_type_name() const override { return c10::demangle_type<BatchType>(); }
  void move_batch(Erased& batch, const c10::Device& device, bool non_blocking) const override {
    if constexpr (accelerate::has_tensor_tree<BatchType>) {
      auto& typed = *static_cast<BatchType*>(batch.get());
      typed = send_to_device(typed, device, non_blocking);
    }
  }

 protected:
  // Stateful datasets: the count asked of get_batch (the loader's batch size).
  void set_request_size(size_t count) { request_size_ = count; }

  Dataset dataset_;
  Collate collate_;

 private:
  static const Unit& list(const Erased& examples) {
    return *static_cast<const Unit*>(examples.get());
  }

  // A stateful dataset's batch as examples: a vector's elements, or the rows
  // of a stacked batch.
  template <class Batch>
  static void split_rows(Batch batch, std::deque<ExampleType>& out) {
    if constexpr (is_std_vector<Batch>::value) {
      for (auto& example : batch) out.push_back(std::move(example));
    } else if constexpr (std::is_same<Batch, at::Tensor>::value) {
      for (int64_t row = 0; row < batch.size(0); ++row) out.push_back(batch[row]);
    } else if constexpr (std::is_same<Batch, torch::data::Example<at::Tensor, at::Tensor>>::value) {
      for (int64_t row = 0; row < batch.data.size(0); ++row) {
        out.push_back({batch.data[row], batch.target[row]});
      }
    } else if constexpr (std::is_same<
                             Batch, torch::data::Example<at::Tensor,
                                                         torch::data::example::NoTarget>>::value) {
      for (int64_t row = 0; row < batch.data.size(0); ++row) out.push_back({batch.data[row]});
    } else {
      static_assert(always_false<Batch>::value,
                    "accelerate::DataLoader: a stateful dataset's batch must be a std::vector of "
                    "examples, an Example of tensors or a tensor, so that it can be split between "
                    "processes");
    }
    (void)batch;
    (void)out;
  }

  size_t request_size_ = 1;
  std::deque<ExampleType> pending_;  // stateful datasets: rows read, not yet handed out
};

}  // namespace detail
}  // namespace accelerate
