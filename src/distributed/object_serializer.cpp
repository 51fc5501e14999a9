#include "accelerate/distributed/object_serializer.h"

#include <ATen/ATen.h>

namespace accelerate {

void Serializer<at::Tensor>::write(ByteWriter& out, const at::Tensor& value) {
  at::Tensor host = value.defined() ? value.to(at::kCPU).contiguous() : value;
  out.write_pod<uint8_t>(host.defined());
  if (!host.defined()) return;
  out.write_pod<int16_t>(static_cast<int16_t>(host.scalar_type()));
  out.write_pod<uint64_t>(host.dim());
  for (auto size : host.sizes()) out.write_pod<int64_t>(size);
  out.write_raw(host.data_ptr(), host.nbytes());
}

at::Tensor Serializer<at::Tensor>::read(ByteReader& in) {
  if (in.read_pod<uint8_t>() == 0) return at::Tensor();
  const auto dtype = static_cast<at::ScalarType>(in.read_pod<int16_t>());
  const auto dims = in.read_pod<uint64_t>();
  if (dims > in.remaining() / sizeof(int64_t))
    throw Error("object bytes end early: bad tensor rank");
  std::vector<int64_t> sizes;
  for (uint64_t d = 0; d < dims; ++d) sizes.push_back(in.read_pod<int64_t>());
  at::Tensor value = at::empty(sizes, at::TensorOptions().dtype(dtype));
  in.read_raw(value.data_ptr(), value.nbytes());
  return value;
}

}  // namespace accelerate
