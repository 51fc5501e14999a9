// The median wall time, in milliseconds, of `repeats` calls of `pass` after
// two untimed warm-up calls: how the micro benchmarks (bench/gpt/
// attention_bench, bench/models/llama_kernels_bench) time one side.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace bench {

template <typename Pass>
double median_ms(const Pass& pass, int repeats) {
  pass();
  pass();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    pass();
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace bench
