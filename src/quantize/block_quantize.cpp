#include "quantize/block_quantize.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "accelerate/common/errors.h"
#include "accelerate/detail/enum_names.h"
#include "compat/parallel_ranges.h"
#include "quantize/block_quantize_kernels.h"

namespace accelerate::quantize {
namespace {

constexpr detail::EnumName<QuantBits> kQuantBitsNames[] = {
    {QuantBits::kInt4, "int4"},
    {QuantBits::kInt8, "int8"},
};
static_assert(detail::names_are_distinct(kQuantBitsNames));

// Blocks go to threads in runs of at least this many elements, so a task is
// worth its scheduling; the bytes do not depend on it (blocks are alone).
constexpr std::int64_t kGrainElements = std::int64_t{1} << 16;

std::string describe(const at::Tensor& t) {
  if (!t.defined()) return "an undefined tensor";
  std::string text = std::string(c10::toString(t.scalar_type())) + " on " + t.device().str();
  if (!t.is_contiguous()) text += ", not contiguous";
  return text;
}

bool is_float_type(at::ScalarType type) {
  return type == at::kFloat || type == at::kBFloat16 || type == at::kHalf;
}

void check_floats(const at::Tensor& t, const char* op, const char* role) {
  if (!t.defined() || !t.device().is_cpu() || !t.is_contiguous() ||
      !is_float_type(t.scalar_type())) {
    throw Error(std::string(op) + ": " + role +
                " must be a contiguous CPU tensor of fp32, bf16 or fp16, got " + describe(t));
  }
}

void check_wire(const at::Tensor& wire, const BlockFormat& format, const char* op) {
  if (!wire.defined() || !wire.device().is_cpu() || !wire.is_contiguous() ||
      wire.scalar_type() != at::kByte) {
    throw Error(std::string(op) + ": the wire must be a contiguous CPU uint8 tensor, got " +
                describe(wire));
  }
  if (wire.numel() != format.wire_bytes()) {
    throw Error(std::string(op) + ": the wire holds " + std::to_string(wire.numel()) +
                " bytes, but " + std::to_string(format.numel) + " elements at " +
                to_string(format.bits) + " in blocks of " + std::to_string(format.block_size) +
                " take " + std::to_string(format.wire_bytes()));
  }
}

std::int64_t payload_offset(const BlockFormat& format, std::int64_t element) {
  return format.bits == QuantBits::kInt8 ? element : element / 2;
}

// Runs body(first_block, end_block, buffer) over the blocks on
// LibTorch's intra-op threads; `buffer` holds one block of fp32 (for input
// or output types that are not fp32), one per task.
template <class Body>
void for_blocks(const BlockFormat& format, bool needs_buffer, const Body& body) {
  const std::int64_t grain = std::max<std::int64_t>(1, kGrainElements / format.block_size);
  compat::parallel_ranges(format.blocks(), grain, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> buffer(needs_buffer ? static_cast<std::size_t>(format.block_size) : 0);
    body(begin, end, buffer.data());
  });
}

// max|x| of a block in fp32, NaN when the block holds a NaN or an inf.
float block_abs_max(const void* data, at::ScalarType type, std::int64_t first, std::int64_t count) {
  std::uint32_t bits = 0;
  if (type == at::kFloat) {
    bits = kernels::abs_max_bits(static_cast<const float*>(data) + first, count);
    if (bits >= 0x7f800000u) return std::numeric_limits<float>::quiet_NaN();
  } else {
    const std::uint16_t half_bits =
        kernels::abs_max_bits16(static_cast<const std::uint16_t*>(data) + first, count);
    if (type == at::kBFloat16) {
      if (half_bits >= 0x7f80u) return std::numeric_limits<float>::quiet_NaN();
      bits = std::uint32_t{half_bits} << 16;
    } else {
      if (half_bits >= 0x7c00u) return std::numeric_limits<float>::quiet_NaN();
      return c10::detail::fp16_ieee_to_fp32_value(half_bits);
    }
  }
  float amax;
  std::memcpy(&amax, &bits, sizeof amax);
  return amax;
}

void quantize_block(const void* data, at::ScalarType type, std::int64_t first, std::int64_t count,
                    const BlockFormat& format, std::uint8_t* scale_at, std::uint8_t* payload_at) {
  const float qmax = static_cast<float>(format.qmax());
  const float amax = block_abs_max(data, type, first, count);
  float scale = 0.0f;
  if (std::isnan(amax) || amax < qmax * FLT_MIN) {
    // NaN or +-inf somewhere: NaN scale, so every element comes back NaN.
    // Zeros, or too small for a normal scale (and a finite qmax / amax):
    // scale 0, exact zeros back.
    if (std::isnan(amax)) scale = amax;
    const std::int64_t payload_bytes = format.bits == QuantBits::kInt8 ? count : (count + 1) / 2;
    std::memset(payload_at, 0, static_cast<std::size_t>(payload_bytes));
  } else {
    scale = amax / qmax;
    const float inv = qmax / amax;
    const bool int8 = format.bits == QuantBits::kInt8;
    auto* q = reinterpret_cast<std::int8_t*>(payload_at);
    if (type == at::kFloat) {
      const float* x = static_cast<const float*>(data) + first;
      int8 ? kernels::quantize_int8(x, count, inv, q)
           : kernels::quantize_int4(x, count, inv, payload_at);
    } else {
      const std::uint16_t* x = static_cast<const std::uint16_t*>(data) + first;
      if (type == at::kBFloat16) {
        int8 ? kernels::quantize_int8_bf16(x, count, inv, q)
             : kernels::quantize_int4_bf16(x, count, inv, payload_at);
      } else {
        int8 ? kernels::quantize_int8_fp16(x, count, inv, q)
             : kernels::quantize_int4_fp16(x, count, inv, payload_at);
      }
    }
  }
  std::memcpy(scale_at, &scale, sizeof scale);
}

float read_scale(const std::uint8_t* wire, std::int64_t block) {
  float scale;
  std::memcpy(&scale, wire + 4 * block, sizeof scale);
  return scale;
}

// Dequantizes block `block` into `out` (fp32), or adds it to `out` when
// `accumulate`.
void dequantize_block(const std::uint8_t* wire, const BlockFormat& format, std::int64_t block,
                      std::int64_t count, float* out, bool accumulate) {
  const float scale = read_scale(wire, block);
  const std::uint8_t* payload =
      wire + format.scale_bytes() + payload_offset(format, block * format.block_size);
  if (format.bits == QuantBits::kInt8) {
    const auto* q = reinterpret_cast<const std::int8_t*>(payload);
    accumulate ? kernels::accumulate_int8(q, count, scale, out)
               : kernels::dequantize_int8(q, count, scale, out);
  } else {
    accumulate ? kernels::accumulate_int4(payload, count, scale, out)
               : kernels::dequantize_int4(payload, count, scale, out);
  }
}

}  // namespace

const char* to_string(QuantBits bits) { return detail::enum_name(kQuantBitsNames, bits, "int?"); }

BlockFormat block_format(std::int64_t numel, QuantBits bits, std::int64_t block_size) {
  if (bits != QuantBits::kInt8 && bits != QuantBits::kInt4) {
    throw Error("block quantization: bits must be int8 or int4, got " +
                std::to_string(static_cast<int>(bits)));
  }
  if (numel < 0)
    throw Error("block quantization: numel must be >= 0, got " + std::to_string(numel));
  if (block_size <= 0) {
    throw Error("block quantization: block_size must be positive, got " +
                std::to_string(block_size));
  }
  if (bits == QuantBits::kInt4 && block_size % 2 != 0) {
    throw Error("block quantization: int4 needs an even block_size (two elements a byte), got " +
                std::to_string(block_size));
  }
  return BlockFormat{numel, bits, block_size};
}

void quantize_into(const at::Tensor& input, QuantBits bits, std::int64_t block_size,
                   const at::Tensor& wire) {
  check_floats(input, "quantize", "the input");
  const BlockFormat format = block_format(input.numel(), bits, block_size);
  check_wire(wire, format, "quantize");
  std::uint8_t* bytes = wire.data_ptr<std::uint8_t>();
  const void* data = input.data_ptr();
  const at::ScalarType type = input.scalar_type();
  for_blocks(format, false, [&](std::int64_t begin, std::int64_t end, float*) {
    for (std::int64_t b = begin; b < end; ++b) {
      const std::int64_t first = b * format.block_size;
      const std::int64_t count = std::min(format.block_size, format.numel - first);
      quantize_block(data, type, first, count, format, bytes + 4 * b,
                     bytes + format.scale_bytes() + payload_offset(format, first));
    }
  });
}

at::Tensor quantize(const at::Tensor& input, QuantBits bits, std::int64_t block_size) {
  check_floats(input, "quantize", "the input");
  const BlockFormat format = block_format(input.numel(), bits, block_size);
  at::Tensor wire = at::empty({format.wire_bytes()}, at::TensorOptions().dtype(at::kByte));
  quantize_into(input, bits, block_size, wire);
  return wire;
}

void dequantize_into(const at::Tensor& wire, QuantBits bits, std::int64_t block_size,
                     const at::Tensor& out) {
  check_floats(out, "dequantize", "the output");
  const BlockFormat format = block_format(out.numel(), bits, block_size);
  check_wire(wire, format, "dequantize");
  const std::uint8_t* bytes = wire.data_ptr<std::uint8_t>();
  const at::ScalarType type = out.scalar_type();
  for_blocks(format, type != at::kFloat, [&](std::int64_t begin, std::int64_t end, float* buffer) {
    for (std::int64_t b = begin; b < end; ++b) {
      const std::int64_t first = b * format.block_size;
      const std::int64_t count = std::min(format.block_size, format.numel - first);
      if (type == at::kFloat) {
        dequantize_block(bytes, format, b, count, out.data_ptr<float>() + first, false);
        continue;
      }
      dequantize_block(bytes, format, b, count, buffer, false);
      if (type == at::kBFloat16) {
        kernels::float_to_bf16(
            buffer, count, reinterpret_cast<std::uint16_t*>(out.data_ptr<at::BFloat16>()) + first);
      } else {
        kernels::float_to_half(buffer, count,
                               reinterpret_cast<std::uint16_t*>(out.data_ptr<at::Half>()) + first);
      }
    }
  });
}

at::Tensor dequantize(const at::Tensor& wire, std::int64_t numel, QuantBits bits,
                      std::int64_t block_size, at::ScalarType dtype) {
  if (!is_float_type(dtype)) {
    throw Error(std::string("dequantize: the output type must be fp32, bf16 or fp16, got ") +
                c10::toString(dtype));
  }
  const BlockFormat format = block_format(numel, bits, block_size);
  at::Tensor out = at::empty({format.numel}, at::TensorOptions().dtype(dtype));
  dequantize_into(wire, bits, block_size, out);
  return out;
}

void dequantize_accumulate(const at::Tensor& wire, QuantBits bits, std::int64_t block_size,
                           const at::Tensor& acc) {
  if (!acc.defined() || !acc.device().is_cpu() || !acc.is_contiguous() ||
      acc.scalar_type() != at::kFloat) {
    throw Error(
        "dequantize_accumulate: the accumulator must be a contiguous CPU fp32 tensor, got " +
        describe(acc));
  }
  const BlockFormat format = block_format(acc.numel(), bits, block_size);
  check_wire(wire, format, "dequantize_accumulate");
  const std::uint8_t* bytes = wire.data_ptr<std::uint8_t>();
  float* sums = acc.data_ptr<float>();
  for_blocks(format, false, [&](std::int64_t begin, std::int64_t end, float*) {
    for (std::int64_t b = begin; b < end; ++b) {
      const std::int64_t first = b * format.block_size;
      const std::int64_t count = std::min(format.block_size, format.numel - first);
      dequantize_block(bytes, format, b, count, sums + first, true);
    }
  });
}

at::Tensor wire_scales(const at::Tensor& wire, const BlockFormat& format) {
  check_wire(wire, format, "wire_scales");
  at::Tensor scales = at::empty({format.blocks()}, at::TensorOptions().dtype(at::kFloat));
  std::memcpy(scales.data_ptr<float>(), wire.data_ptr<std::uint8_t>(),
              static_cast<std::size_t>(format.scale_bytes()));
  return scales;
}

at::Tensor wire_payload(const at::Tensor& wire, const BlockFormat& format) {
  check_wire(wire, format, "wire_payload");
  return wire.narrow(0, format.scale_bytes(), format.payload_bytes());
}

}  // namespace accelerate::quantize
