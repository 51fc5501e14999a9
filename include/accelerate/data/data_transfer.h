// Reaching the tensors inside a batch, so the DataLoader can pin batches and
// move them to the accelerator's device (Accelerate's send_to_device and
// recursively_apply).
//
// TensorTree<T>::map(value, fn) returns a copy of `value` with fn applied to
// every tensor in it. Provided for at::Tensor, torch::data::Example,
// std::vector, std::pair, std::tuple, std::map, std::optional, and leaf values
// (arithmetic types, std::string) that hold no tensor. For a batch type of
// your own, specialise it (before instantiating a DataLoader over it):
//   template <> struct accelerate::TensorTree<MyBatch> {
//     template <class F> static MyBatch map(const MyBatch& b, const F& fn) {
//       return {fn(b.images), fn(b.labels), b.ids};
//     }
//   };
#pragma once

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/data/example.h>

namespace accelerate {

template <class T, class Enable = void>
struct TensorTree;  // Specialise for your own batch types (see above).

template <>
struct TensorTree<at::Tensor> {
  template <class F>
  static at::Tensor map(const at::Tensor& value, const F& fn) {
    return value.defined() ? fn(value) : value;
  }
};

template <class T>
struct TensorTree<T, std::enable_if_t<std::is_arithmetic<T>::value || std::is_enum<T>::value ||
                                      std::is_same<T, std::string>::value>> {
  template <class F>
  static T map(const T& value, const F&) {
    return value;
  }
};

template <class Data, class Target>
struct TensorTree<torch::data::Example<Data, Target>> {
  template <class F>
  static torch::data::Example<Data, Target> map(const torch::data::Example<Data, Target>& value,
                                                const F& fn) {
    return {TensorTree<Data>::map(value.data, fn), TensorTree<Target>::map(value.target, fn)};
  }
};

template <class Data>
struct TensorTree<torch::data::Example<Data, torch::data::example::NoTarget>> {
  using Value = torch::data::Example<Data, torch::data::example::NoTarget>;
  template <class F>
  static Value map(const Value& value, const F& fn) {
    return {TensorTree<Data>::map(value.data, fn)};
  }
};

template <class T>
struct TensorTree<std::vector<T>> {
  template <class F>
  static std::vector<T> map(const std::vector<T>& values, const F& fn) {
    std::vector<T> mapped;
    mapped.reserve(values.size());
    for (const auto& value : values) mapped.push_back(TensorTree<T>::map(value, fn));
    return mapped;
  }
};

template <class A, class B>
struct TensorTree<std::pair<A, B>> {
  template <class F>
  static std::pair<A, B> map(const std::pair<A, B>& value, const F& fn) {
    return {TensorTree<A>::map(value.first, fn), TensorTree<B>::map(value.second, fn)};
  }
};

template <class... Ts>
struct TensorTree<std::tuple<Ts...>> {
  template <class F>
  static std::tuple<Ts...> map(const std::tuple<Ts...>& value, const F& fn) {
    return std::apply(
        [&](const Ts&... items) { return std::tuple<Ts...>(TensorTree<Ts>::map(items, fn)...); },
        value);
  }
};

template <class K, class V>
struct TensorTree<std::map<K, V>> {
  template <class F>
  static std::map<K, V> map(const std::map<K, V>& values, const F& fn) {
    std::map<K, V> mapped;
    for (const auto& [key, value] : values) mapped.emplace(key, TensorTree<V>::map(value, fn));
    return mapped;
  }
};

template <class T>
struct TensorTree<std::optional<T>> {
  template <class F>
  static std::optional<T> map(const std::optional<T>& value, const F& fn) {
    if (!value) return std::nullopt;
    return TensorTree<T>::map(*value, fn);
  }
};

namespace detail {
template <class T, class = void>
struct is_complete : std::false_type {};
template <class T>
struct is_complete<T, std::void_t<decltype(sizeof(T))>> : std::true_type {};

// Whether TensorTree reaches every part of T (containers ask their elements).
template <class T>
struct has_tensor_tree : is_complete<TensorTree<T>> {};
template <class T>
struct has_tensor_tree<std::vector<T>> : has_tensor_tree<T> {};
template <class A, class B>
struct has_tensor_tree<std::pair<A, B>>
    : std::integral_constant<bool, has_tensor_tree<A>::value && has_tensor_tree<B>::value> {};
template <class... Ts>
struct has_tensor_tree<std::tuple<Ts...>>
    : std::integral_constant<bool, (has_tensor_tree<Ts>::value && ...)> {};
template <class K, class V>
struct has_tensor_tree<std::map<K, V>> : has_tensor_tree<V> {};
template <class T>
struct has_tensor_tree<std::optional<T>> : has_tensor_tree<T> {};
template <class Data, class Target>
struct has_tensor_tree<torch::data::Example<Data, Target>>
    : std::integral_constant<bool, has_tensor_tree<Data>::value && has_tensor_tree<Target>::value> {
};
template <class Data>
struct has_tensor_tree<torch::data::Example<Data, torch::data::example::NoTarget>>
    : has_tensor_tree<Data> {};
}  // namespace detail

template <class T>
constexpr bool has_tensor_tree = detail::has_tensor_tree<T>::value;

// Whether page-locked memory can be had: LibTorch was built with CUDA and a
// GPU is present. Without it pinning is a no-op.
bool can_pin_memory();

// `batch` with every tensor copied to `device` (non_blocking overlaps the copy
// with compute when the source is pinned).
template <class T>
T send_to_device(const T& batch, const c10::Device& device, bool non_blocking = false) {
  return TensorTree<T>::map(batch, [&](const at::Tensor& tensor) {
    return tensor.to(tensor.options().device(device), non_blocking);
  });
}

// `batch` with every CPU tensor in page-locked memory; unchanged where
// can_pin_memory() is false.
template <class T>
T pin_memory(const T& batch) {
  if (!can_pin_memory()) return batch;
  return TensorTree<T>::map(batch, [](const at::Tensor& tensor) {
    return tensor.is_cpu() ? tensor.pin_memory() : tensor;
  });
}

}  // namespace accelerate
