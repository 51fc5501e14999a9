// How a DataLoader reads a dataset type: which of the four kinds of
// dataset.h it is, what it yields, and what a collate function receives.
// Everything here is decided at compile time from the type's members.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>
#include <torch/data/example.h>

namespace accelerate {

enum class DatasetKind {
  kMapStyle,  // get(index), size()
  kBatch,     // get_batch(indices), size(): a torch::data::datasets::BatchDataset
  kStateful,  // get_batch(count) -> optional batch, reset(): a torch StatefulDataset
  kIterable,  // next(), reset()
  kUnsupported,
};

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
struct has_reset : std::false_type {};
template <class D>
struct has_reset<D, std::void_t<decltype(std::declval<D&>().reset())>> : std::true_type {};

template <class D, class = void>
struct has_size : std::false_type {};
template <class D>
struct has_size<D, std::void_t<decltype(std::declval<const D&>().size())>> : std::true_type {};

template <class D, class = void>
struct has_set_epoch : std::false_type {};
template <class D>
struct has_set_epoch<D, std::void_t<decltype(std::declval<D&>().set_epoch(int64_t{}))>>
    : std::true_type {};

// LibTorch's BatchDataset family declares BatchType, BatchRequestType and
// is_stateful; a stateful dataset's BatchType is an optional batch.
template <class D, class = void>
struct torch_batch_dataset {
  static constexpr bool by_indices = false;
  static constexpr bool by_count = false;
};
template <class D>
struct torch_batch_dataset<
    D, std::void_t<typename D::BatchType, typename D::BatchRequestType, decltype(D::is_stateful)>> {
  static constexpr bool by_indices =
      !D::is_stateful && std::is_same<typename D::BatchRequestType, c10::ArrayRef<size_t>>::value;
  static constexpr bool by_count =
      D::is_stateful && std::is_same<typename D::BatchRequestType, size_t>::value;
};

template <class D>
constexpr DatasetKind kind_of() {
  if constexpr (has_get<D>::value) {
    return DatasetKind::kMapStyle;
  } else if constexpr (has_next<D>::value) {
    return DatasetKind::kIterable;
  } else if constexpr (torch_batch_dataset<D>::by_indices) {
    return DatasetKind::kBatch;
  } else if constexpr (torch_batch_dataset<D>::by_count && has_reset<D>::value) {
    return DatasetKind::kStateful;
  } else {
    return DatasetKind::kUnsupported;
  }
}

}  // namespace detail

template <class D>
constexpr DatasetKind dataset_kind = detail::kind_of<D>();

template <class D>
constexpr bool is_map_style_dataset = dataset_kind<D> == DatasetKind::kMapStyle;
template <class D>
constexpr bool is_iterable_dataset = dataset_kind<D> == DatasetKind::kIterable;
template <class D>
constexpr bool is_batch_dataset = dataset_kind<D> == DatasetKind::kBatch;
template <class D>
constexpr bool is_stateful_dataset = dataset_kind<D> == DatasetKind::kStateful;

// Stands in for the example type of a type that is no dataset, so that the
// one error a user sees is DataLoader's static_assert.
struct NotADataset {};

namespace detail {

template <class T>
struct is_std_vector : std::false_type {};
template <class T, class A>
struct is_std_vector<std::vector<T, A>> : std::true_type {};

// A stateful dataset's batch split into examples: a vector is its elements;
// a stacked batch (an Example of tensors, or a tensor) is its rows.
template <class Batch>
struct rows_of {
  using type = Batch;  // a tensor: rows are tensors
};
template <class T, class A>
struct rows_of<std::vector<T, A>> {
  using type = T;
};

template <class D, DatasetKind Kind = dataset_kind<D>>
struct example_of {
  using type = NotADataset;
};
template <class D>
struct example_of<D, DatasetKind::kMapStyle> {
  using type = std::decay_t<decltype(std::declval<D&>().get(size_t{}))>;
};
template <class D>
struct example_of<D, DatasetKind::kIterable> {
  using type = std::decay_t<decltype(*std::declval<D&>().next())>;
};
// A stateful dataset's batch, unwrapped from the optional get_batch returns.
template <class D>
using stateful_batch_t = std::decay_t<decltype(*std::declval<typename D::BatchType&>())>;
template <class D>
struct example_of<D, DatasetKind::kStateful> {
  using type = typename rows_of<stateful_batch_t<D>>::type;
};

// What one load yields and a collate function receives: the examples of a
// batch, or for a batch dataset the batch get_batch returned.
template <class D, DatasetKind Kind = dataset_kind<D>>
struct load_unit {
  using type = std::vector<typename example_of<D>::type>;
};
template <class D>
struct load_unit<D, DatasetKind::kBatch> {
  using type = typename D::BatchType;
};

}  // namespace detail

// The example type a dataset yields (NotADataset for batch datasets, whose
// unit is the batch, and for types that are no dataset).
template <class D>
using dataset_example_t = typename detail::example_of<D>::type;
// What the loader's collate function receives.
template <class D>
using dataset_load_unit_t = typename detail::load_unit<D>::type;

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

}  // namespace accelerate
