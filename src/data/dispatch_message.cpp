#include "data/dispatch_message.h"

#include <cstring>

#include <ATen/ATen.h>

#include "accelerate/distributed/communicator.h"
#include "accelerate/distributed/object_serializer.h"

namespace accelerate {
namespace detail {

std::string encode(const DispatchMessage& message) {
  ByteWriter out;
  out.write_pod<uint8_t>(message.last);
  out.write_pod(message.remainder);
  out.write_pod(message.first_batch);
  Serializer<std::string>::write(out, message.error);
  Serializer<std::vector<std::vector<std::string>>>::write(out, message.parts);
  return out.take();
}

DispatchMessage decode(const std::string& bytes) {
  ByteReader in(bytes);
  DispatchMessage message;
  message.last = in.read_pod<uint8_t>() != 0;
  message.remainder = in.read_pod<int64_t>();
  message.first_batch = in.read_pod<uint64_t>();
  message.error = Serializer<std::string>::read(in);
  message.parts = Serializer<std::vector<std::vector<std::string>>>::read(in);
  if (!in.at_end()) throw Error("dispatch_batches: malformed message from process 0");
  return message;
}

std::string exchange_from_process_zero(Communicator& comm, const std::string* bytes) {
  // Two broadcasts: the length, then the bytes (receivers size their buffer).
  const bool sender = comm.rank() == 0;
  at::Tensor length = at::zeros({1}, at::kLong);
  if (sender) length.fill_(static_cast<int64_t>(bytes->size()));
  comm.broadcast(length, 0);
  at::Tensor payload = at::empty({length.item<int64_t>()}, at::kByte);
  if (sender && !bytes->empty()) std::memcpy(payload.data_ptr(), bytes->data(), bytes->size());
  comm.broadcast(payload, 0);
  if (sender) return *bytes;
  return std::string(static_cast<const char*>(payload.data_ptr()),
                     static_cast<size_t>(payload.numel()));
}

}  // namespace detail
}  // namespace accelerate
