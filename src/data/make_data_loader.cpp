#include "accelerate/data/make_data_loader.h"

#include <algorithm>

namespace accelerate {
namespace detail {

DataLoaderOptions options_from_torch(const torch::data::DataLoaderOptions& torch_options,
                                     bool shuffle) {
  DataLoaderOptions options(torch_options.batch_size());
  options.shuffle(shuffle)
      .drop_last(torch_options.drop_last())
      .num_workers(torch_options.workers());
  // LibTorch keeps at most max_jobs batches in flight (default 2 per worker,
  // our prefetch_factor's default too).
  const size_t workers = torch_options.workers();
  if (torch_options.max_jobs().has_value() && workers > 0) {
    const size_t jobs = *torch_options.max_jobs();
    options.prefetch_factor(std::max<size_t>(1, (jobs + workers - 1) / workers));
  }
  if (torch_options.timeout().has_value()) options.timeout(*torch_options.timeout());
  return options;
}

}  // namespace detail
}  // namespace accelerate
