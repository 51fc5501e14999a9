// Internal to DataLoader: the few things the library's loading logic (which
// knows neither the example nor the batch type) needs done with the user's
// types. DataLoader<Dataset, Collate> implements them through
// TypedLoaderOps; everything else lives in the library's sources.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <c10/core/Device.h>
#include <c10/util/Type.h>

#include "accelerate/data_transfer.h"
#include "accelerate/dataset.h"
#include "accelerate/errors.h"
#include "accelerate/object_serializer.h"

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
    : std::integral_constant<bool, is_serializable<Data>::value &&
                                       is_serializable<Target>::value> {};
template <class Data>
struct is_serializable<torch::data::Example<Data, torch::data::example::NoTarget>>
    : is_serializable<Data> {};

template <class Dataset, class Collate>
class TypedLoaderOps : public LoaderOps {
  static_assert(is_map_style_dataset<Dataset> || is_iterable_dataset<Dataset>,
                "accelerate::DataLoader needs a map-style dataset (size(), get(index)) or an "
                "iterable one (next() returning std::optional<Example>, reset()); see dataset.h");

 public:
  using ExampleType = dataset_example_t<Dataset>;
  using Examples = std::vector<ExampleType>;
  using BatchType = std::decay_t<std::invoke_result_t<Collate&, Examples>>;

  TypedLoaderOps(Dataset dataset, Collate collate)
      : dataset_(std::move(dataset)), collate_(std::move(collate)) {}

  bool is_iterable() const override { return is_iterable_dataset<Dataset>; }
  std::optional<size_t> length() const override { return dataset_length(dataset_); }

  Erased fetch(const std::vector<size_t>& indices) override {
    auto examples = std::make_shared<Examples>();
    if constexpr (is_map_style_dataset<Dataset>) {
      examples->reserve(indices.size());
      for (size_t index : indices) examples->push_back(dataset_.get(index));
    }
    return examples;
  }

  void restart_stream(int64_t epoch) override {
    if constexpr (is_iterable_dataset<Dataset>) {
      if constexpr (has_set_epoch<Dataset>::value) dataset_.set_epoch(epoch);
      dataset_.reset();
    }
    (void)epoch;
  }

  Erased read(size_t count) override {
    auto examples = std::make_shared<Examples>();
    if constexpr (is_iterable_dataset<Dataset>) {
      examples->reserve(count);
      while (examples->size() < count) {
        auto example = dataset_.next();
        if (!example) break;
        examples->push_back(std::move(*example));
      }
    }
    return examples;
  }

  size_t count(const Erased& examples) const override { return list(examples).size(); }

  Erased select(const Erased& step, size_t step_begin, const Erased& start,
                const std::vector<size_t>& positions) const override {
    const Examples& step_examples = list(step);
    const Examples& start_examples = list(start);
    auto chosen = std::make_shared<Examples>();
    chosen->reserve(positions.size());
    for (size_t position : positions) {
      chosen->push_back(position >= step_begin ? step_examples.at(position - step_begin)
                                               : start_examples.at(position));
    }
    return chosen;
  }

  bool examples_serializable() const override { return is_serializable<ExampleType>::value; }
  std::string example_type_name() const override { return c10::demangle_type<ExampleType>(); }
  std::string serialize(const Erased& examples) const override {
    if constexpr (is_serializable<ExampleType>::value) {
      return accelerate::serialize(list(examples));
    } else {
      throw Error("no accelerate::Serializer for " + example_type_name());
    }
  }
  Erased deserialize(const std::string& bytes) const override {
    if constexpr (is_serializable<ExampleType>::value) {
      return std::make_shared<Examples>(accelerate::deserialize<Examples>(bytes));
    } else {
      throw Error("no accelerate::Serializer for " + example_type_name());
    }
  }

  Erased collate(const Erased& examples, bool pin) override {
    auto batch = std::make_shared<BatchType>(collate_(std::move(*static_cast<Examples*>(examples.get()))));
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
  Dataset dataset_;
  Collate collate_;

 private:
  static const Examples& list(const Erased& examples) {
    return *static_cast<const Examples*>(examples.get());
  }
};

}  // namespace detail
}  // namespace accelerate
