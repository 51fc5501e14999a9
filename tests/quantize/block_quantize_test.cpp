// Block quantization for ZeRO++ (src/quantize/block_quantize.h): the wire
// bytes against a per-block reference built from at:: ops, the error bound
// per block, zero, tiny and non-finite blocks, accumulation, the byte
// layout, determinism across thread counts, and bad input.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "accelerate/common/cpu_capability.h"
#include "accelerate/common/errors.h"
#include "quantize/block_quantize.h"
#include "quantize/block_quantize_kernels.h"

namespace block_quantize_test {

using accelerate::quantize::block_format;
using accelerate::quantize::BlockFormat;
using accelerate::quantize::QuantBits;
namespace quant = accelerate::quantize;
namespace kernels = accelerate::quantize::kernels;

// Runs `body` with each instruction set of the loops this processor runs
// (baseline, AVX2, AVX-512), then goes back to the best.
void for_each_isa(const std::function<void(const std::string&)>& body) {
  for (accelerate::CpuCapability isa : kernels::supported_isas()) {
    ASSERT_TRUE(kernels::use_isa(isa));
    body(std::string(" [") + accelerate::to_string(isa) + "]");
  }
  kernels::use_best_isa();
}

// The inputs the properties are checked on: shapes of data gradients and
// weights take, each with its own seed.
struct Distribution {
  const char* name;
  std::function<at::Tensor(std::int64_t)> make;
};

std::vector<Distribution> distributions() {
  return {
      {"normal", [](std::int64_t n) { return torch::randn({n}); }},
      {"uniform", [](std::int64_t n) { return torch::rand({n}) * 2 - 1; }},
      {"heavy_tailed", [](std::int64_t n) { return torch::randn({n}).pow(3) * 1e-3; }},
      {"outliers",
       [](std::int64_t n) {
         auto x = torch::randn({n}) * 1e-2;
         x.index_put_({torch::randint(n, {std::max<std::int64_t>(1, n / 97)})}, 50.0);
         return x;
       }},
      {"magnitudes",  // each stretch of 37 elements at its own scale, 1e-30 .. 1e30
       [](std::int64_t n) {
         auto exponent = (torch::arange(n) / 37).remainder(61).to(torch::kFloat) - 30;
         return torch::randn({n}) * torch::pow(10.0, exponent);
       }},
  };
}

constexpr std::int64_t kBlockSizes[] = {2, 8, 64, 1000, 4096};
// Numbers of elements: several blocks, a tail shorter than a block, odd.
std::vector<std::int64_t> lengths_for(std::int64_t block) {
  return {1, block - 1, block, 3 * block + 1, 5 * block + block / 2 + 1};
}

// The straightforward scheme, one block at a time: scale = max|x| / qmax,
// q = round(x * (qmax / max|x|)).
struct ReferenceBlocks {
  at::Tensor q;  // int8, one per element
  std::vector<float> scales;
};

ReferenceBlocks reference_blocks(const at::Tensor& input, QuantBits bits, std::int64_t block) {
  const BlockFormat format = block_format(input.numel(), bits, block);
  const float qmax = static_cast<float>(format.qmax());
  const at::Tensor flat = input.reshape({-1}).to(torch::kFloat);
  ReferenceBlocks ref;
  std::vector<at::Tensor> values;
  for (std::int64_t first = 0; first < format.numel; first += block) {
    const at::Tensor x = flat.narrow(0, first, std::min(block, format.numel - first));
    const float amax = x.abs().max().item<float>();
    if (!x.isfinite().all().item<bool>()) {
      ref.scales.push_back(NAN);
      values.push_back(torch::zeros({x.numel()}, torch::kChar));
    } else if (amax < qmax * FLT_MIN) {
      ref.scales.push_back(0.0f);
      values.push_back(torch::zeros({x.numel()}, torch::kChar));
    } else {
      ref.scales.push_back(amax / qmax);
      values.push_back(x.mul(qmax / amax).round().to(torch::kChar));
    }
  }
  ref.q = format.numel > 0 ? torch::cat(values) : torch::zeros({0}, torch::kChar);
  return ref;
}

// The wire as documented: the scales' bytes, then int8 bytes or nibble
// pairs (element 2k high).
at::Tensor reference_wire(const at::Tensor& input, QuantBits bits, std::int64_t block) {
  ReferenceBlocks ref = reference_blocks(input, bits, block);
  at::Tensor q = ref.q;
  at::Tensor payload;
  if (bits == QuantBits::kInt8) {
    payload = q.view(torch::kByte);
  } else {
    if (q.numel() % 2 != 0) q = torch::cat({q, torch::zeros({1}, torch::kChar)});
    const at::Tensor pairs = q.to(torch::kInt).reshape({-1, 2});
    payload = (pairs.select(1, 0).bitwise_and(0xf).mul(16) + pairs.select(1, 1).bitwise_and(0xf))
                  .to(torch::kByte);
  }
  const auto blocks = static_cast<std::int64_t>(ref.scales.size());
  at::Tensor scale_bytes =
      torch::from_blob(ref.scales.data(), {blocks}, torch::kFloat).clone().view(torch::kByte);
  return torch::cat({scale_bytes, payload});
}

// q * scale per block, in fp32.
at::Tensor reference_dequantized(const at::Tensor& input, QuantBits bits, std::int64_t block) {
  const ReferenceBlocks ref = reference_blocks(input, bits, block);
  std::vector<at::Tensor> parts;
  for (std::size_t b = 0; b < ref.scales.size(); ++b) {
    const std::int64_t first = static_cast<std::int64_t>(b) * block;
    parts.push_back(ref.q.narrow(0, first, std::min(block, ref.q.numel() - first))
                        .to(torch::kFloat)
                        .mul(ref.scales[b]));
  }
  return torch::cat(parts);
}

std::string case_name(const char* dist, QuantBits bits, std::int64_t block, std::int64_t n,
                      at::ScalarType type) {
  return std::string(dist) + " " + quant::to_string(bits) + " block " + std::to_string(block) +
         " n " + std::to_string(n) + " " + c10::toString(type);
}

TEST(BlockQuantize, WireBytesEqualThePerBlockReference) {
  torch::manual_seed(3);
  for (QuantBits bits : {QuantBits::kInt8, QuantBits::kInt4}) {
    for (const Distribution& dist : distributions()) {
      for (std::int64_t block : kBlockSizes) {
        for (std::int64_t n : lengths_for(block)) {
          for (at::ScalarType type : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
            at::Tensor x = dist.make(n);
            if (type == torch::kHalf) x = x.clamp(-60000, 60000);  // finite in fp16
            x = x.to(type);
            const at::Tensor expected = reference_wire(x, bits, block);
            for_each_isa([&](const std::string& isa) {
              ASSERT_TRUE(torch::equal(quant::quantize(x, bits, block), expected))
                  << case_name(dist.name, bits, block, n, type) << isa;
            });
          }
        }
      }
    }
  }
}

TEST(BlockQuantize, DequantizedValuesEqualThePerBlockReference) {
  torch::manual_seed(4);
  for (QuantBits bits : {QuantBits::kInt8, QuantBits::kInt4}) {
    for (const Distribution& dist : distributions()) {
      for (std::int64_t block : {8, 1000}) {
        const std::int64_t n = 7 * block + 3;
        const at::Tensor x = dist.make(n);
        const at::Tensor expected = reference_dequantized(x, bits, block);
        const at::Tensor start = torch::randn({n});
        for_each_isa([&](const std::string& isa) {
          const at::Tensor wire = quant::quantize(x, bits, block);
          const std::string name = case_name(dist.name, bits, block, n, torch::kFloat) + isa;
          ASSERT_TRUE(
              torch::equal(quant::dequantize(wire, n, bits, block, torch::kFloat), expected))
              << name;
          at::Tensor acc = start.clone();
          quant::dequantize_accumulate(wire, bits, block, acc);
          ASSERT_TRUE(torch::equal(acc, start + expected)) << name;
        });
      }
    }
  }
}

// Per block: |x - deq(q(x))| <= scale / 2, plus the few fp32 roundings in
// computing x * (qmax / m) and q * scale (a relative 2^-22 of m at most:
// 1e-4 of an int8 step); |q| <= qmax, and the largest |x| maps to qmax.
TEST(BlockQuantize, DequantizedValuesAreWithinHalfAStepOfEachBlock) {
  torch::manual_seed(5);
  for (QuantBits bits : {QuantBits::kInt8, QuantBits::kInt4}) {
    for (const Distribution& dist : distributions()) {
      for (std::int64_t block : kBlockSizes) {
        for (std::int64_t n : lengths_for(block)) {
          const at::Tensor x = dist.make(n);
          const BlockFormat format = block_format(n, bits, block);
          const at::Tensor wire = quant::quantize(x, bits, block);
          const at::Tensor back = quant::dequantize(wire, n, bits, block, torch::kFloat);
          const at::Tensor scales = quant::wire_scales(wire, format);
          const std::string name = case_name(dist.name, bits, block, n, torch::kFloat);
          for (std::int64_t b = 0; b < format.blocks(); ++b) {
            const std::int64_t first = b * block;
            const std::int64_t count = std::min(block, n - first);
            const at::Tensor xb = x.narrow(0, first, count);
            const float scale = scales[b].item<float>();
            const float amax = xb.abs().max().item<float>();
            ASSERT_EQ(scale, amax / format.qmax()) << name << " block " << b;
            const float err = (xb - back.narrow(0, first, count)).abs().max().item<float>();
            ASSERT_LE(err, scale * (0.5f + 1e-4f)) << name << " block " << b;
            const at::Tensor q = (back.narrow(0, first, count) / scale).round();
            ASSERT_LE(q.abs().max().item<float>(), format.qmax()) << name << " block " << b;
            ASSERT_EQ(q.abs().max().item<float>(), format.qmax()) << name << " block " << b;
          }
        }
      }
    }
  }
}

TEST(BlockQuantize, ZeroAndTinyBlocksComeBackAsExactZeros) {
  torch::manual_seed(7);
  for_each_isa([&](const std::string& isa) {
    for (QuantBits bits : {QuantBits::kInt8, QuantBits::kInt4}) {
      at::Tensor x = torch::randn({5 * 64});
      x.narrow(0, 64, 64).zero_();
      x.narrow(0, 128, 64).fill_(-0.0f);
      x.narrow(0, 192, 64).copy_(torch::randn({64}) * 1e-39);  // subnormal fp32
      const at::Tensor wire = quant::quantize(x, bits, 64);
      const at::Tensor back = quant::dequantize(wire, x.numel(), bits, 64, torch::kFloat);
      EXPECT_TRUE(back.isfinite().all().item<bool>()) << quant::to_string(bits) << isa;
      EXPECT_TRUE(back.narrow(0, 64, 192).eq(0).all().item<bool>()) << quant::to_string(bits);
      const at::Tensor scales = quant::wire_scales(wire, block_format(x.numel(), bits, 64));
      EXPECT_EQ(scales[1].item<float>(), 0.0f);
      EXPECT_EQ(scales[3].item<float>(), 0.0f);
      EXPECT_GT(scales[4].item<float>(), 0.0f);
      // Just above the tiny limit (qmax * FLT_MIN) a block is quantized.
      at::Tensor small = torch::full({8}, 2 * 127 * FLT_MIN);
      const at::Tensor small_back = quant::dequantize(quant::quantize(small, QuantBits::kInt8, 8),
                                                      8, QuantBits::kInt8, 8, torch::kFloat);
      EXPECT_TRUE(torch::equal(small_back, small));
    }
  });
}

// A block holding NaN or +-inf comes back NaN in every element (dequantized
// in every output type, and accumulated), so the fp16 loss scaler still sees
// the overflow; the other blocks are untouched.
TEST(BlockQuantize, NonFiniteBlocksComeBackAllNaN) {
  torch::manual_seed(9);
  const float specials[] = {NAN, INFINITY, -INFINITY};
  for_each_isa([&](const std::string& isa) {
    for (QuantBits bits : {QuantBits::kInt8, QuantBits::kInt4}) {
      for (at::ScalarType in_type : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
        at::Tensor x = torch::randn({4 * 32 + 5});
        for (int k = 0; k < 3; ++k) x[k * 32 + 3 + k] = specials[k];
        x = x.to(in_type);
        const at::Tensor wire = quant::quantize(x, bits, 32);
        const at::Tensor finite_back =
            quant::dequantize(quant::quantize(x.narrow(0, 96, 37).contiguous(), bits, 32), 37, bits,
                              32, torch::kFloat);
        for (at::ScalarType out_type : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
          const at::Tensor back = quant::dequantize(wire, x.numel(), bits, 32, out_type);
          const std::string name = std::string(quant::to_string(bits)) + " " +
                                   c10::toString(in_type) + " -> " + c10::toString(out_type) + isa;
          EXPECT_TRUE(back.narrow(0, 0, 96).isnan().all().item<bool>()) << name;
          EXPECT_TRUE(torch::equal(back.narrow(0, 96, 37), finite_back.to(out_type))) << name;
        }
        at::Tensor acc = torch::ones({x.numel()});
        quant::dequantize_accumulate(wire, bits, 32, acc);
        EXPECT_TRUE(acc.narrow(0, 0, 96).isnan().all().item<bool>());
        EXPECT_TRUE(acc.narrow(0, 96, 37).isfinite().all().item<bool>());
      }
    }
  });
}

TEST(BlockQuantize, AccumulateAddsEachProductInFp32) {
  torch::manual_seed(11);
  for (QuantBits bits : {QuantBits::kInt8, QuantBits::kInt4}) {
    const std::int64_t n = 3 * 4096 + 77;
    const at::Tensor start = torch::randn({n});
    std::vector<at::Tensor> wires;
    for (int peer = 0; peer < 3; ++peer) {
      wires.push_back(quant::quantize(torch::randn({n}).to(torch::kBFloat16), bits));
    }
    at::Tensor acc = start.clone();
    at::Tensor expected = start.clone();
    for (const at::Tensor& wire : wires) {
      quant::dequantize_accumulate(wire, bits, quant::kDefaultBlockSize, acc);
      expected =
          expected + quant::dequantize(wire, n, bits, quant::kDefaultBlockSize, torch::kFloat);
    }
    EXPECT_TRUE(torch::equal(acc, expected)) << quant::to_string(bits);
  }
}

TEST(BlockQuantize, OutputTypesAreTheFp32ValuesRounded) {
  torch::manual_seed(13);
  for (QuantBits bits : {QuantBits::kInt8, QuantBits::kInt4}) {
    const at::Tensor wire = quant::quantize(torch::randn({1000}) * 1e3, bits, 64);
    const at::Tensor fp32 = quant::dequantize(wire, 1000, bits, 64, torch::kFloat);
    for (at::ScalarType type : {torch::kBFloat16, torch::kHalf}) {
      EXPECT_TRUE(torch::equal(quant::dequantize(wire, 1000, bits, 64, type), fp32.to(type)))
          << quant::to_string(bits) << " " << c10::toString(type);
    }
  }
}

// The layout spelled out: scales first, then int8 bytes or nibble pairs
// (first element high); ties round to even.
TEST(BlockQuantize, WireLayoutByHand) {
  const at::Tensor x = torch::tensor({7.0f, -7.0f, 3.0f, -2.0f, 1.0f});
  const at::Tensor int4 = quant::quantize(x, QuantBits::kInt4, 8);
  ASSERT_EQ(int4.numel(), 4 + 3);
  float scale;
  std::memcpy(&scale, int4.data_ptr<std::uint8_t>(), 4);
  EXPECT_EQ(scale, 1.0f);
  const std::vector<int> packed(int4.data_ptr<std::uint8_t>() + 4,
                                int4.data_ptr<std::uint8_t>() + 7);
  EXPECT_EQ(packed, (std::vector<int>{0x79, 0x3e, 0x10}));

  const at::Tensor y = torch::tensor({127.0f, 2.5f, 3.5f, -2.5f, -0.5f, 0.5f, -127.0f});
  const at::Tensor int8 = quant::quantize(y, QuantBits::kInt8, 7);
  ASSERT_EQ(int8.numel(), 4 + 7);
  const auto* q = reinterpret_cast<const std::int8_t*>(int8.data_ptr<std::uint8_t>() + 4);
  EXPECT_EQ(std::vector<int>(q, q + 7), (std::vector<int>{127, 2, 4, -2, 0, 0, -127}));
}

TEST(BlockQuantize, WireBytesAreExactAndAnySliceOfABufferWorks) {
  EXPECT_EQ(block_format(10, QuantBits::kInt8, 4).wire_bytes(), 3 * 4 + 10);
  EXPECT_EQ(block_format(11, QuantBits::kInt4, 4).wire_bytes(), 3 * 4 + 6);
  EXPECT_EQ(block_format(0, QuantBits::kInt4, 4).wire_bytes(), 0);
  EXPECT_EQ(block_format(1 << 20, QuantBits::kInt8).wire_bytes(), 256 * 4 + (1 << 20));
  EXPECT_EQ(block_format(1 << 20, QuantBits::kInt4).wire_bytes(), 256 * 4 + (1 << 19));
  torch::manual_seed(17);
  for (QuantBits bits : {QuantBits::kInt8, QuantBits::kInt4}) {
    const at::Tensor x = torch::randn({301});
    const std::int64_t bytes = block_format(301, bits, 16).wire_bytes();
    EXPECT_EQ(quant::quantize(x, bits, 16).numel(), bytes);
    // Rank 1's slice of a buffer for three ranks, at an odd offset.
    at::Tensor buffer = torch::full({3 + 3 * bytes}, 0xab, torch::kByte);
    const at::Tensor slice = buffer.narrow(0, 3 + bytes, bytes);
    quant::quantize_into(x, bits, 16, slice);
    EXPECT_TRUE(torch::equal(slice, quant::quantize(x, bits, 16)));
    EXPECT_TRUE(buffer.narrow(0, 0, 3 + bytes).eq(0xab).all().item<bool>());
    EXPECT_TRUE(buffer.narrow(0, 3 + 2 * bytes, bytes).eq(0xab).all().item<bool>());
    at::Tensor out = torch::empty({301});
    quant::dequantize_into(slice, bits, 16, out);
    EXPECT_TRUE(torch::equal(
        out, quant::dequantize(quant::quantize(x, bits, 16), 301, bits, 16, torch::kFloat)));
  }
}

TEST(BlockQuantize, BytesAreTheSameOnEveryRunAndThreadCount) {
  torch::manual_seed(19);
  const int threads_before = at::get_num_threads();
  const at::Tensor x = torch::randn({(1 << 20) + 333});
  for (QuantBits bits : {QuantBits::kInt8, QuantBits::kInt4}) {
    for (at::ScalarType type : {torch::kFloat, torch::kBFloat16}) {
      const at::Tensor input = x.to(type);
      at::set_num_threads(1);
      const at::Tensor first = quant::quantize(input, bits, 1024);
      for_each_isa([&](const std::string& isa) {
        for (int threads : {1, 2, 3, 4}) {
          at::set_num_threads(threads);
          for (int run = 0; run < 2; ++run) {
            EXPECT_TRUE(torch::equal(quant::quantize(input, bits, 1024), first))
                << quant::to_string(bits) << " " << c10::toString(type) << " threads " << threads
                << isa;
          }
        }
      });
    }
  }
  at::set_num_threads(threads_before);
}

// The vectorizable fp16 -> fp32 conversion agrees with c10's on all 65536
// halves (NaNs as NaNs).
TEST(BlockQuantize, HalfConversionMatchesC10OnEveryHalf) {
  std::vector<std::uint16_t> halves(1 << 16);
  for (std::size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<std::uint16_t>(i);
  for_each_isa([&](const std::string& isa) {
    std::vector<float> converted(halves.size());
    kernels::half_to_float(halves.data(), 1 << 16, converted.data());
    for (std::size_t i = 0; i < halves.size(); ++i) {
      const float expected = c10::detail::fp16_ieee_to_fp32_value(halves[i]);
      if (std::isnan(expected)) {
        ASSERT_TRUE(std::isnan(converted[i])) << i << isa;
      } else {
        std::uint32_t a, b;
        std::memcpy(&a, &converted[i], 4);
        std::memcpy(&b, &expected, 4);
        ASSERT_EQ(a, b) << "half bits " << i << isa;
      }
    }
  });
}

TEST(BlockQuantize, BadInputIsOneErrorNamingTheProblem) {
  using testing::HasSubstr;
  const auto message = [](const std::function<void()>& call) {
    try {
      call();
    } catch (const accelerate::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const at::Tensor x = torch::randn({4, 6});
  EXPECT_THAT(message([&] { quant::quantize(x.t(), QuantBits::kInt8); }),
              HasSubstr("not contiguous"));
  EXPECT_THAT(message([&] { quant::quantize(x.to(torch::kDouble), QuantBits::kInt8); }),
              HasSubstr("fp32, bf16 or fp16, got Double"));
  EXPECT_THAT(message([&] { quant::quantize(x, QuantBits::kInt4, 5); }),
              HasSubstr("int4 needs an even block_size"));
  EXPECT_THAT(message([&] { quant::quantize(x, QuantBits::kInt8, 0); }),
              HasSubstr("block_size must be positive"));
  EXPECT_THAT(message([&] {
                quant::quantize_into(x, QuantBits::kInt8, 4, torch::empty({31}, torch::kByte));
              }),
              HasSubstr("the wire holds 31 bytes, but 24 elements at int8 in blocks of 4 take 48"));
  const at::Tensor wire = quant::quantize(x, QuantBits::kInt8, 4);
  EXPECT_THAT(message([&] {
                quant::dequantize_accumulate(wire, QuantBits::kInt8, 4,
                                             torch::zeros({24}, torch::kBFloat16));
              }),
              HasSubstr("accumulator must be a contiguous CPU fp32 tensor"));
  EXPECT_THAT(message([&] { quant::dequantize(wire, 24, QuantBits::kInt8, 4, torch::kInt); }),
              HasSubstr("output type must be fp32, bf16 or fp16"));
  EXPECT_THAT(message([&] { quant::dequantize(wire, 25, QuantBits::kInt8, 4, torch::kFloat); }),
              HasSubstr("the wire holds 48 bytes, but 25 elements"));
  EXPECT_THAT(message([&] {
                quant::dequantize(wire.to(torch::kChar), 24, QuantBits::kInt8, 4, torch::kFloat);
              }),
              HasSubstr("the wire must be a contiguous CPU uint8 tensor"));
}

// The loops in use are the highest set kernel_capability() allows, and none
// above it can be chosen: under the capped CTest legs an AVX-512 machine runs
// the AVX2 and baseline loops only.
TEST(BlockQuantize, KernelsRunNoSetAboveTheCapability) {
  const accelerate::CpuCapability cap = accelerate::kernel_capability();
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  EXPECT_EQ(kernels::active_isa(), cap);
#endif
  for (accelerate::CpuCapability isa : kernels::supported_isas()) {
    EXPECT_LE(static_cast<int>(isa), static_cast<int>(cap)) << accelerate::to_string(isa);
  }
  if (cap != accelerate::CpuCapability::kAvx512) {
    EXPECT_FALSE(kernels::use_isa(accelerate::CpuCapability::kAvx512));
  }
}

}  // namespace block_quantize_test
