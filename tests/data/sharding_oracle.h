// Independent oracles for the sharding tests: Accelerate's two samplers
// written the way they work (step by step over batches or over a stream),
// not through the global-step model that batch_sharding.cpp implements.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace accelerate {
namespace testing {

using Batches = std::vector<std::vector<size_t>>;

// BatchSamplerShard over a sequential batch sampler of `batch_size`
// (`drop_last` applies to that sampler), without split_batches.
inline Batches batch_sampler_shard(const std::vector<size_t>& order, size_t batch_size,
                                   size_t processes, size_t process, bool drop_last,
                                   bool even_batches) {
  Batches sampler;
  for (size_t i = 0; i < order.size(); i += batch_size) {
    std::vector<size_t> batch;
    for (size_t j = i; j < order.size() && j < i + batch_size; ++j) batch.push_back(order[j]);
    if (batch.size() == batch_size || !drop_last) sampler.push_back(batch);
  }
  Batches out;
  std::vector<size_t> initial;
  std::vector<size_t> pending;
  size_t index = 0;
  std::vector<size_t> batch;
  for (; index < sampler.size(); ++index) {
    batch = sampler[index];
    if (!drop_last && index < processes) initial.insert(initial.end(), batch.begin(), batch.end());
    if (index % processes == process) pending = batch;
    if (index % processes == processes - 1 && batch.size() == batch_size) {
      out.push_back(pending);
      pending.clear();
    }
  }
  if (drop_last || initial.empty()) return out;
  if (!even_batches) {
    if (!pending.empty()) out.push_back(pending);
    return out;
  }
  if (pending.size() == batch_size) out.push_back(pending);
  index = sampler.size() - 1;  // Python's loop variable keeps the last index
  while (initial.size() < processes * batch_size) {
    auto copy = initial;
    initial.insert(initial.end(), copy.begin(), copy.end());
  }
  if (batch.size() == batch_size) {
    batch.clear();
    index += 1;
  }
  size_t cycle = 0;
  while (index % processes != 0 || !batch.empty()) {
    const size_t end = cycle + batch_size - batch.size();
    batch.insert(batch.end(), initial.begin() + cycle, initial.begin() + end);
    if (index % processes == process) out.push_back(batch);
    cycle = end;
    batch.clear();
    ++index;
  }
  return out;
}

// BatchSamplerShard with split_batches: batch_size is the global batch.
inline Batches batch_sampler_shard_split(const std::vector<size_t>& order, size_t batch_size,
                                         size_t processes, size_t process, bool drop_last,
                                         bool even_batches) {
  const size_t part = batch_size / processes;
  Batches out;
  std::vector<size_t> initial;
  std::vector<size_t> batch;
  for (size_t i = 0; i < order.size(); i += batch_size) {
    batch.assign(order.begin() + i, order.begin() + std::min(order.size(), i + batch_size));
    if (batch.size() < batch_size && drop_last) {
      batch.clear();
      break;
    }
    if (i == 0) initial = batch;
    if (batch.size() == batch_size) {
      out.emplace_back(batch.begin() + part * process, batch.begin() + part * (process + 1));
    }
  }
  if (drop_last || initial.empty() || batch.size() == batch_size) return out;
  if (!even_batches) {
    if (batch.size() > part * process) {
      out.emplace_back(batch.begin() + part * process,
                       batch.begin() + std::min(batch.size(), part * (process + 1)));
    }
    return out;
  }
  while (initial.size() < batch_size) {
    auto copy = initial;
    initial.insert(initial.end(), copy.begin(), copy.end());
  }
  batch.insert(batch.end(), initial.begin(), initial.end());
  out.emplace_back(batch.begin() + part * process, batch.begin() + part * (process + 1));
  return out;
}

// IterableDatasetShard: elements of a stream, then batched per process.
inline Batches iterable_dataset_shard(size_t length, size_t batch_size, size_t processes,
                                      size_t process, bool drop_last, bool split_batches) {
  const size_t real = split_batches ? batch_size : batch_size * processes;
  const size_t part = split_batches ? batch_size / processes : batch_size;
  std::vector<size_t> yielded;
  std::vector<size_t> first;
  std::vector<size_t> current;
  for (size_t element = 0; element < length; ++element) {
    current.push_back(element);
    if (current.size() == real) {
      for (size_t i = part * process; i < part * (process + 1); ++i) yielded.push_back(current[i]);
      if (first.empty()) first = current;
      current.clear();
    }
  }
  if (!drop_last && !current.empty()) {
    if (first.empty()) first = current;
    while (current.size() < real) current.insert(current.end(), first.begin(), first.end());
    for (size_t i = part * process; i < part * (process + 1); ++i) yielded.push_back(current[i]);
  }
  Batches out;
  for (size_t i = 0; i < yielded.size(); i += part) {
    out.emplace_back(yielded.begin() + i, yielded.begin() + std::min(yielded.size(), i + part));
  }
  return out;
}

}  // namespace testing
}  // namespace accelerate
