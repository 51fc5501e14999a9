// accelerate::make_data_loader: LibTorch's torch::data::make_data_loader with
// the same arguments, answering with accelerate's sharded DataLoader. A
// LibTorch program's data code converts by a change of namespace:
//
//   auto dataset = torch::data::datasets::MNIST(root)
//                      .map(torch::data::transforms::Normalize<>(0.1307, 0.3081))
//                      .map(torch::data::transforms::Stack<>());
//   auto loader = accelerate::make_data_loader<torch::data::samplers::RandomSampler>(
//       std::move(dataset), torch::data::DataLoaderOptions().batch_size(64).workers(2));
//   accelerator.prepare(model, optimizer, loader);
//   for (auto& batch : *loader) { ... }   // the batch type LibTorch's loader yields
//
// The batches have the type LibTorch's loader would give: the dataset's
// get_batch result (std::vector<Example<>> without Stack<>, Example<> with
// it). How torch::data::DataLoaderOptions map (docs/data.md has the table):
//   batch_size        -> DataLoaderOptions::batch_size
//   workers           -> num_workers
//   max_jobs          -> prefetch_factor = ceil(max_jobs / workers)
//   drop_last         -> drop_last
//   timeout           -> timeout
//   enforce_ordering  -> batches always come in order; false is accepted and
//                        changes nothing (sharding needs the order)
//   Sampler           -> RandomSampler: shuffle (the same permutation on every
//                        process, seeded per epoch); SequentialSampler: none.
//                        Streams (stateful datasets) take no sampler.
// Unlike LibTorch, worker threads share the one dataset (no copy per worker),
// and streams are split between processes by the loader (docs/data.md,
// "Differences from LibTorch's loader"). Call it qualified: unqualified,
// argument-dependent lookup finds LibTorch's make_data_loader too.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

#include <torch/data/dataloader_options.h>
#include <torch/data/samplers/random.h>
#include <torch/data/samplers/sequential.h>

#include "accelerate/data/data_loader.h"

namespace accelerate {

namespace detail {

// The collate that reproduces LibTorch's batch type: its loaders yield what
// get_batch returns, which for a map-style dataset is the vector of examples,
// and for a stateful one with a stacked batch is that stack again.
template <class Dataset, DatasetKind Kind = dataset_kind<Dataset>>
struct torch_like_collate {
  using type = KeepBatch;
};
template <class Dataset>
struct torch_like_collate<Dataset, DatasetKind::kStateful> {
  using type = std::conditional_t<is_std_vector<stateful_batch_t<Dataset>>::value, KeepBatch,
                                  DefaultCollate<dataset_example_t<Dataset>>>;
};
template <class Dataset>
struct torch_like_collate<Dataset, DatasetKind::kIterable> {
  using type = default_collate_t<Dataset>;
};

DataLoaderOptions options_from_torch(const torch::data::DataLoaderOptions& options, bool shuffle);

}  // namespace detail

template <class Dataset>
using TorchLikeDataLoader = DataLoader<Dataset, typename detail::torch_like_collate<Dataset>::type>;

template <class Sampler = torch::data::samplers::RandomSampler, class Dataset>
std::unique_ptr<TorchLikeDataLoader<Dataset>> make_data_loader(
    Dataset dataset, torch::data::DataLoaderOptions options = torch::data::DataLoaderOptions()) {
  constexpr bool kStream = is_iterable_dataset<Dataset> || is_stateful_dataset<Dataset>;
  static_assert(kStream || std::is_same<Sampler, torch::data::samplers::RandomSampler>::value ||
                    std::is_same<Sampler, torch::data::samplers::SequentialSampler>::value,
                "accelerate::make_data_loader takes RandomSampler (shuffle) or SequentialSampler; "
                "the prepared loader shards the data itself, so no Distributed*Sampler is needed");
  constexpr bool kShuffle =
      !kStream && std::is_same<Sampler, torch::data::samplers::RandomSampler>::value;
  return std::make_unique<TorchLikeDataLoader<Dataset>>(
      std::move(dataset), detail::options_from_torch(options, kShuffle));
}

}  // namespace accelerate
