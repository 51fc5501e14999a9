// Taking a flat buffer's memory away and giving it back while every tensor
// that aliases it (parameters made with storage_alias, the tensors autograd
// saved for backward) keeps pointing at the same storage object. This is how
// ZeRO stage 3 can free gathered parameters after a unit's forward and
// gather them again before its backward without rebuilding the graph
// (PyTorch's FSDP does the same with storage resizing). Internal.
#pragma once

#include <cstddef>

#include <ATen/ATen.h>

namespace accelerate::detail {

inline c10::StorageImpl* storage_of(const at::Tensor& buffer) {
  return buffer.storage().unsafeGetStorageImpl();
}

// Frees the storage's memory; its size becomes 0 bytes. Aliases must not be
// read until materialize_storage.
inline void release_storage(const at::Tensor& buffer) {
  c10::StorageImpl* storage = storage_of(buffer);
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, buffer.device()));
  storage->set_nbytes(0);
}

inline bool storage_released(const at::Tensor& buffer) { return storage_of(buffer)->nbytes() == 0; }

// Gives the storage `nbytes` of fresh, uninitialised memory from its own
// allocator (the caller fills it, e.g. by an all-gather). Nothing happens
// when it already has them.
inline void materialize_storage(const at::Tensor& buffer, std::size_t nbytes) {
  c10::StorageImpl* storage = storage_of(buffer);
  if (storage->nbytes() == nbytes && (nbytes == 0 || storage->data() != nullptr)) return;
  storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
  storage->set_nbytes(nbytes);
}

}  // namespace accelerate::detail
