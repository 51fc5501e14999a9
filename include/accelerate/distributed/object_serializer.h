// Turning values into bytes for gather_object and broadcast_object.
//
// Supported out of the box: arithmetic types and enums, std::string, and
// std::vector / std::pair / std::map / std::optional of supported types, and
// at::Tensor (received on the CPU). To send your own type, specialise
//   template <> struct accelerate::Serializer<MyType> {
//     static void write(ByteWriter& out, const MyType& value);
//     static MyType read(ByteReader& in);
//   };
// The format is for processes of one job (same build, same machine type),
// not for storage.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "accelerate/common/errors.h"

namespace accelerate {

class ByteWriter {
 public:
  void write_raw(const void* data, size_t size) {
    bytes_.append(static_cast<const char*>(data), size);
  }
  template <class T>
  void write_pod(const T& value) {
    static_assert(std::is_trivially_copyable<T>::value,
                  "write_pod needs a trivially copyable type");
    write_raw(&value, sizeof(T));
  }
  std::string take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

class ByteReader {
 public:
  explicit ByteReader(const std::string& bytes) : bytes_(bytes) {}
  void read_raw(void* data, size_t size) {
    if (size > bytes_.size() - offset_) {
      throw Error("object bytes end early: wanted " + std::to_string(size) + " more at offset " +
                  std::to_string(offset_) + " of " + std::to_string(bytes_.size()));
    }
    std::memcpy(data, bytes_.data() + offset_, size);
    offset_ += size;
  }
  template <class T>
  T read_pod() {
    T value;
    read_raw(&value, sizeof(T));
    return value;
  }
  bool at_end() const { return offset_ == bytes_.size(); }
  size_t remaining() const { return bytes_.size() - offset_; }

 private:
  const std::string& bytes_;
  size_t offset_ = 0;
};

template <class T, class Enable = void>
struct Serializer;  // Specialise for your own types (see above).

template <class T>
struct Serializer<T, std::enable_if_t<std::is_arithmetic<T>::value || std::is_enum<T>::value>> {
  static void write(ByteWriter& out, const T& value) { out.write_pod(value); }
  static T read(ByteReader& in) { return in.read_pod<T>(); }
};

template <>
struct Serializer<std::string> {
  static void write(ByteWriter& out, const std::string& value) {
    out.write_pod<uint64_t>(value.size());
    out.write_raw(value.data(), value.size());
  }
  static std::string read(ByteReader& in) {
    const auto size = in.read_pod<uint64_t>();
    if (size > in.remaining()) throw Error("object bytes end early: string longer than the data");
    std::string value(size, '\0');
    in.read_raw(value.data(), value.size());
    return value;
  }
};

template <class T>
struct Serializer<std::vector<T>> {
  static void write(ByteWriter& out, const std::vector<T>& values) {
    out.write_pod<uint64_t>(values.size());
    for (const auto& value : values) Serializer<T>::write(out, value);
  }
  static std::vector<T> read(ByteReader& in) {
    const auto count = in.read_pod<uint64_t>();
    std::vector<T> values;
    for (uint64_t i = 0; i < count; ++i) values.push_back(Serializer<T>::read(in));
    return values;
  }
};

template <class A, class B>
struct Serializer<std::pair<A, B>> {
  static void write(ByteWriter& out, const std::pair<A, B>& value) {
    Serializer<A>::write(out, value.first);
    Serializer<B>::write(out, value.second);
  }
  static std::pair<A, B> read(ByteReader& in) {
    A first = Serializer<A>::read(in);
    B second = Serializer<B>::read(in);
    return {std::move(first), std::move(second)};
  }
};

template <class K, class V>
struct Serializer<std::map<K, V>> {
  static void write(ByteWriter& out, const std::map<K, V>& values) {
    Serializer<std::vector<std::pair<K, V>>>::write(
        out, std::vector<std::pair<K, V>>(values.begin(), values.end()));
  }
  static std::map<K, V> read(ByteReader& in) {
    auto pairs = Serializer<std::vector<std::pair<K, V>>>::read(in);
    return std::map<K, V>(pairs.begin(), pairs.end());
  }
};

template <class T>
struct Serializer<std::optional<T>> {
  static void write(ByteWriter& out, const std::optional<T>& value) {
    out.write_pod<uint8_t>(value.has_value());
    if (value) Serializer<T>::write(out, *value);
  }
  static std::optional<T> read(ByteReader& in) {
    if (in.read_pod<uint8_t>() == 0) return std::nullopt;
    return Serializer<T>::read(in);
  }
};

// dtype, sizes and the raw bytes of a CPU copy; read back on the CPU.
template <>
struct Serializer<at::Tensor> {
  static void write(ByteWriter& out, const at::Tensor& value);
  static at::Tensor read(ByteReader& in);
};

template <class T>
std::string serialize(const T& value) {
  ByteWriter out;
  Serializer<T>::write(out, value);
  return out.take();
}

template <class T>
T deserialize(const std::string& bytes) {
  ByteReader in(bytes);
  T value = Serializer<T>::read(in);
  if (!in.at_end())
    throw Error("object bytes have trailing data: sender and receiver types differ");
  return value;
}

}  // namespace accelerate
