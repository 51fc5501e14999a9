// Block quantization for ZeRO++ (src/quantize/block_quantize.h) against a
// plain copy of the same bytes: for fp32, bf16 and fp16 tensors of several
// sizes, the time of at::Tensor::copy_ into a same-size buffer, of
// quantize_into (int8 and int4, into a preallocated wire, as a collective's
// send buffer would be) and of dequantize_accumulate (a reduce-scatter
// receiver's work: the wire added into an fp32 buffer). Throughput is the
// input's bytes per second for copy and quantize, the fp32 accumulator's
// bytes per second for accumulate. The goal (docs/sharding.md): quantize >=
// 0.5x copy for fp32 and bf16 inputs, int8 and int4, 1 MB .. 64 MB, on one
// thread and on the default threads.
//
// Each time is the median over --reps after one warm-up run.
//
// Usage: zero_quantize_bench [--mb 1,8,64] [--reps 9] [--threads 1,0]
//          [--block 4096] [--dtypes fp32,bf16,fp16] [--isa best|all]
// (--threads 0: at::get_num_threads()'s default; --isa all: each set of
// loops the processor runs, baseline / avx2 / avx512, not just the best.)
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "quantize/block_quantize.h"
#include "quantize/block_quantize_kernels.h"
#include "support/flag_pairs.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace quant = accelerate::quantize;
namespace kernels = accelerate::quantize::kernels;

struct Settings {
  std::vector<double> megabytes = {1, 8, 64};
  std::vector<int> threads = {1, 0};
  int reps = 9;
  std::int64_t block = quant::kDefaultBlockSize;
  std::vector<std::string> dtypes = {"fp32", "bf16", "fp16"};
  bool all_isas = false;
};

Settings parse(int argc, char** argv) {
  Settings s;
  for (const auto& [flag, value] : bench::flag_pairs(argc, argv)) {
    if (flag == "--mb") {
      s.megabytes.clear();
      for (const std::string& v : bench::comma_items(value)) s.megabytes.push_back(std::stod(v));
    } else if (flag == "--threads") {
      s.threads.clear();
      for (const std::string& v : bench::comma_items(value)) s.threads.push_back(std::stoi(v));
    } else if (flag == "--reps") {
      s.reps = std::stoi(value);
    } else if (flag == "--block") {
      s.block = std::stoll(value);
    } else if (flag == "--dtypes") {
      s.dtypes = bench::comma_items(value);
      for (const std::string& d : s.dtypes) {
        if (d != "fp32" && d != "bf16" && d != "fp16") {
          throw std::invalid_argument("--dtypes expects fp32, bf16 or fp16, got '" + d + "'");
        }
      }
    } else if (flag == "--isa") {
      if (value != "best" && value != "all") {
        throw std::invalid_argument("--isa expects best or all, got '" + value + "'");
      }
      s.all_isas = value == "all";
    } else {
      throw std::invalid_argument("unknown flag " + flag);
    }
  }
  if (s.reps < 1) throw std::invalid_argument("--reps must be >= 1");
  return s;
}

at::ScalarType type_of(const std::string& name) {
  if (name == "bf16") return at::kBFloat16;
  if (name == "fp16") return at::kHalf;
  return at::kFloat;
}

template <class F>
double median_seconds(int reps, const F& work) {
  work();  // warm-up: first-touch page faults, thread pool start
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    work();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void measure(const Settings& settings, const char* isa, int threads, const std::string& dtype,
             at::ScalarType type, double mb) {
  const std::int64_t bytes = static_cast<std::int64_t>(mb * (1 << 20));
  const std::int64_t numel = std::max<std::int64_t>(1, bytes / c10::elementSize(type));
  torch::manual_seed(1);
  const at::Tensor input = torch::randn({numel}).to(type);
  at::Tensor copy = torch::empty_like(input);
  const double input_bytes = static_cast<double>(input.nbytes());
  const double copy_s = median_seconds(settings.reps, [&] { copy.copy_(input); });
  for (quant::QuantBits bits : {quant::QuantBits::kInt8, quant::QuantBits::kInt4}) {
    const quant::BlockFormat format = quant::block_format(numel, bits, settings.block);
    at::Tensor wire = torch::empty({format.wire_bytes()}, torch::kByte);
    const double quant_s = median_seconds(
        settings.reps, [&] { quant::quantize_into(input, bits, settings.block, wire); });
    at::Tensor acc = torch::zeros({numel});
    const double acc_s = median_seconds(
        settings.reps, [&] { quant::dequantize_accumulate(wire, bits, settings.block, acc); });
    const double copy_gbs = input_bytes / copy_s / 1e9;
    const double quant_gbs = input_bytes / quant_s / 1e9;
    std::printf("%8s %7d %5s %6.2f %5s %9.2f %10.2f %7.2f %9.2f\n", isa, threads, dtype.c_str(), mb,
                quant::to_string(bits), copy_gbs, quant_gbs, quant_gbs / copy_gbs,
                4.0 * static_cast<double>(numel) / acc_s / 1e9);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Settings settings;
  try {
    settings = parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "zero_quantize_bench: " << e.what() << "\n";
    return 2;
  }
  const int default_threads = at::get_num_threads();
  std::vector<accelerate::CpuCapability> isas = {kernels::active_isa()};
  if (settings.all_isas) isas = kernels::supported_isas();
  std::printf(
      "block %lld, median of %d, default threads %d; GB/s = 1e9 bytes/s (input bytes; "
      "accumulate: fp32 bytes)\n",
      static_cast<long long>(settings.block), settings.reps, default_threads);
  std::printf("%8s %7s %5s %6s %5s %9s %10s %7s %9s\n", "isa", "threads", "dtype", "MB", "bits",
              "copy GB/s", "quant GB/s", "ratio", "acc GB/s");
  for (accelerate::CpuCapability isa : isas) {
    kernels::use_isa(isa);
    for (int threads : settings.threads) {
      const int used = threads > 0 ? threads : default_threads;
      at::set_num_threads(used);
      for (const std::string& dtype : settings.dtypes) {
        const at::ScalarType type = type_of(dtype);
        for (double mb : settings.megabytes) {
          measure(settings, accelerate::to_string(isa), used, dtype, type, mb);
        }
      }
    }
  }
  kernels::use_best_isa();
  at::set_num_threads(default_threads);
  return 0;
}
