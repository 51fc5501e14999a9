// Datasets a DataLoader reads. Two kinds, recognised by their members (no base
// class needed):
//
// Map-style: random access by index.
//     size_t size() const;                 // or std::optional<size_t>, as in
//     Example get(size_t index);           //   torch::data::datasets::Dataset
//   Any torch::data::datasets::Dataset (e.g. torch::data::datasets::MNIST)
//   qualifies. With num_workers > 1, get() is called from several threads at
//   once.
//
// Iterable: a stream read front to back, restarted every epoch.
//     std::optional<Example> next();       // the next example; nullopt at the end
//     void reset();                        // rewind to the start of the stream
//   and optionally
//     void set_epoch(int64_t epoch);       // called before reset() each epoch
//     size_t size() const;                 // examples per epoch, if known
//   next() is only ever called by one thread at a time, in order. When
//   batches are not dispatched from process 0, every process reads the whole
//   stream and keeps its share, so the stream must yield the same examples in
//   the same order on every process (derive any shuffling from the epoch).
//
// The Example type is whatever get()/next() returns; the default collate
// handles at::Tensor and torch::data::Example<at::Tensor, at::Tensor> (data,
// target) or <at::Tensor, NoTarget>. Examples dispatched from process 0 are
// sent with accelerate::Serializer (object_serializer.h), specialised here for
// torch::data::Example.
#pragma once

#include <cstddef>
#include <optional>
#include <type_traits>
#include <utility>

#include <ATen/core/Tensor.h>
#include <torch/data/example.h>

#include "accelerate/object_serializer.h"

namespace accelerate {

// The default example type: (data, target).
using Example = torch::data::Example<at::Tensor, at::Tensor>;

namespace detail {

template <class D, class = void>
struct has_get : std::false_type {};
template <class D>
struct has_get<D, std::void_t<decltype(std::declval<D&>().get(size_t{}))>> : std::true_type {};

template <class D, class = void>
struct has_next : std::false_type {};
template <class D>
struct has_next<D, std::void_t<decltype(*std::declval<D&>().next())>> : std::true_type {};

template <class D, class = void>
struct has_size : std::false_type {};
template <class D>
struct has_size<D, std::void_t<decltype(std::declval<const D&>().size())>> : std::true_type {};

template <class D, class = void>
struct has_set_epoch : std::false_type {};
template <class D>
struct has_set_epoch<D, std::void_t<decltype(std::declval<D&>().set_epoch(int64_t{}))>>
    : std::true_type {};

}  // namespace detail

template <class D>
constexpr bool is_map_style_dataset = detail::has_get<D>::value;
template <class D>
constexpr bool is_iterable_dataset = detail::has_next<D>::value && !detail::has_get<D>::value;

namespace detail {
template <class D, bool Map = is_map_style_dataset<D>>
struct example_of {
  using type = std::decay_t<decltype(std::declval<D&>().get(size_t{}))>;
};
template <class D>
struct example_of<D, false> {
  using type = std::decay_t<decltype(*std::declval<D&>().next())>;
};
}  // namespace detail

// The example type a dataset yields.
template <class D>
using dataset_example_t = typename detail::example_of<D>::type;

// The dataset's length if it tells one: size() returning a number, or an
// optional one (LibTorch's datasets). Iterable datasets without size() have
// none.
template <class D>
std::optional<size_t> dataset_length(const D& dataset) {
  if constexpr (detail::has_size<D>::value) {
    auto size = dataset.size();
    if constexpr (std::is_integral<decltype(size)>::value) {
      return static_cast<size_t>(size);
    } else {
      if (!size.has_value()) return std::nullopt;
      return static_cast<size_t>(*size);
    }
  } else {
    return std::nullopt;
  }
}

// A map-style dataset over the rows of two tensors: example i is
// (data[i], targets[i]).
class TensorDataset {
 public:
  TensorDataset(at::Tensor data, at::Tensor targets);
  size_t size() const { return static_cast<size_t>(data_.size(0)); }
  Example get(size_t index) const;
  const at::Tensor& data() const { return data_; }
  const at::Tensor& targets() const { return targets_; }

 private:
  at::Tensor data_;
  at::Tensor targets_;
};

// Examples travel between processes (dispatch_batches) as their tensors.
template <class Data, class Target>
struct Serializer<torch::data::Example<Data, Target>> {
  static void write(ByteWriter& out, const torch::data::Example<Data, Target>& example) {
    Serializer<Data>::write(out, example.data);
    Serializer<Target>::write(out, example.target);
  }
  static torch::data::Example<Data, Target> read(ByteReader& in) {
    Data data = Serializer<Data>::read(in);
    Target target = Serializer<Target>::read(in);
    return {std::move(data), std::move(target)};
  }
};

template <class Data>
struct Serializer<torch::data::Example<Data, torch::data::example::NoTarget>> {
  static void write(ByteWriter& out,
                    const torch::data::Example<Data, torch::data::example::NoTarget>& example) {
    Serializer<Data>::write(out, example.data);
  }
  static torch::data::Example<Data, torch::data::example::NoTarget> read(ByteReader& in) {
    return {Serializer<Data>::read(in)};
  }
};

}  // namespace accelerate
