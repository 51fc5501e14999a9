// Datasets a DataLoader reads. Four kinds, recognised by their members (no
// base class needed; dataset_traits.h tells them apart):
//
// Map-style: random access by index.
//     size_t size() const;                 // or std::optional<size_t>, as in
//     Example get(size_t index);           //   torch::data::datasets::Dataset
//   Any torch::data::datasets::Dataset (e.g. torch::data::datasets::MNIST)
//   qualifies. With num_workers > 1, get() is called from several threads at
//   once.
//
// Batch: LibTorch's torch::data::datasets::BatchDataset, read a batch of
// indices at a time:
//     Batch get_batch(c10::ArrayRef<size_t> indices);
//     std::optional<size_t> size() const;
//   e.g. the pipelines LibTorch programs build,
//     MNIST(root).map(Normalize<>(0.1307, 0.3081)).map(Stack<>())
//   (Batch = std::vector<Example<>> without Stack, Example<> with it), and
//   subclasses of BatchDataset. The loader shards indices exactly as for a
//   map-style dataset and yields the batches get_batch returns; a collate
//   function, if given, receives them. With num_workers > 1, get_batch() is
//   called from several threads at once.
//
// Stateful: LibTorch's StatefulDataset (e.g. a ChunkDataset behind
// make_shared_dataset), a stream read in batches:
//     std::optional<Batch> get_batch(size_t count);   // nullopt at the end
//     void reset();                                   // rewind, every epoch
//   Batch is a std::vector of examples, or a stacked batch (an Example of
//   tensors, or a tensor) that the loader splits into rows. Sharded like an
//   iterable dataset (below).
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

#include "accelerate/data/dataset_traits.h"
#include "accelerate/distributed/object_serializer.h"

namespace accelerate {

// The default example type: (data, target).
using Example = torch::data::Example<at::Tensor, at::Tensor>;

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
