// Block-wise symmetric quantization for ZeRO++'s quantized communication:
// int8 weights for the all-gather (qwZ) and int4 or int8 gradients for the
// reduce-scatter (qgZ). A float tensor is cut into blocks of `block_size`
// consecutive elements (the last one may be shorter); each block gets one
// fp32 scale = max|x| / qmax (qmax 127 for int8, 7 for int4) and its
// elements become q = round(x * (qmax / max|x|)), half to even, in
// [-qmax, qmax]. Dequantized, an element is q * scale, within scale / 2 of x
// (docs/sharding.md, "Quantized communication (ZeRO++ qwZ/qgZ): kernels").
//
// The wire format is one contiguous byte buffer, so a collective can send it
// as bytes: the blocks' fp32 scales (native byte order) first, then the
// payload: one int8 per element, or for int4 two elements per byte (element
// 2k in the high nibble, 2k+1 in the low one, two's complement; an odd last
// element leaves a zero low nibble). Nothing is padded or aligned, so
// wire_bytes() is exact: 4 * blocks + numel (int8) or 4 * blocks +
// ceil(numel / 2) (int4). Readers copy the scales out, so a wire may start at
// any byte (one rank's slice of a larger buffer).
//
// Special blocks, chosen so the fp16 loss scaler still sees an overflow:
// - a block holding a NaN or +-inf is sent with scale NaN and a zero payload,
//   and comes back (and accumulates) as NaN in every element;
// - a block of zeros, or whose max|x| is below qmax * FLT_MIN (so tiny that
//   its scale would not be a normal float), is sent with scale 0 and comes
//   back as exact zeros.
//
// CPU tensors only; the loops are vectorized by the compiler
// (block_quantize_kernels.cpp) and blocks are shared among at::parallel_for's
// threads. Every block is computed alone, so the bytes do not depend on the
// number of threads. Internal to the library.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

namespace accelerate::quantize {

enum class QuantBits { kInt4 = 4, kInt8 = 8 };

const char* to_string(QuantBits bits);

// The block (DeepSpeed: group) length used unless told otherwise. DeepSpeed's
// qwZ picks groups of at most 8000 elements that divide the tensor (4096 for
// a power-of-two size; its source calls 4k the optimal size); its qgZ uses
// numel / max(rows, columns, world), one row of a square weight.
inline constexpr std::int64_t kDefaultBlockSize = 4096;

// The geometry of one quantized tensor on the wire.
struct BlockFormat {
  std::int64_t numel = 0;
  QuantBits bits = QuantBits::kInt8;
  std::int64_t block_size = kDefaultBlockSize;

  std::int64_t blocks() const { return (numel + block_size - 1) / block_size; }
  std::int64_t scale_bytes() const { return 4 * blocks(); }
  std::int64_t payload_bytes() const { return bits == QuantBits::kInt8 ? numel : (numel + 1) / 2; }
  std::int64_t wire_bytes() const { return scale_bytes() + payload_bytes(); }
  // Largest quantized magnitude: 127 or 7.
  int qmax() const { return bits == QuantBits::kInt8 ? 127 : 7; }
};

// A checked format: accelerate::Error when numel is negative, block_size is
// not positive, or (int4) block_size is odd (a block must start on a byte).
BlockFormat block_format(std::int64_t numel, QuantBits bits,
                         std::int64_t block_size = kDefaultBlockSize);

// Quantizes `input` (contiguous CPU fp32, bf16 or fp16; any shape, read as
// flat) into `wire`: contiguous CPU uint8 of exactly
// block_format(input.numel(), bits, block_size).wire_bytes() elements (a
// narrow() of a larger buffer is fine).
void quantize_into(const at::Tensor& input, QuantBits bits, std::int64_t block_size,
                   const at::Tensor& wire);
// The same into a new uint8 tensor.
at::Tensor quantize(const at::Tensor& input, QuantBits bits,
                    std::int64_t block_size = kDefaultBlockSize);

// Writes `wire`'s values into `out` (contiguous CPU fp32, bf16 or fp16, read
// as flat; its numel is the format's), rounding q * scale to out's type.
void dequantize_into(const at::Tensor& wire, QuantBits bits, std::int64_t block_size,
                     const at::Tensor& out);
// The same into a new 1-D tensor of `numel` elements of type `dtype`.
at::Tensor dequantize(const at::Tensor& wire, std::int64_t numel, QuantBits bits,
                      std::int64_t block_size, at::ScalarType dtype);
// acc += q * scale, element by element, in fp32 (`acc`: contiguous CPU
// fp32): what a reduce-scatter's receiver does with each peer's piece.
void dequantize_accumulate(const at::Tensor& wire, QuantBits bits, std::int64_t block_size,
                           const at::Tensor& acc);

// A copy of the wire's scales (fp32, one per block) and a view of its
// payload (uint8), for tests and diagnostics.
at::Tensor wire_scales(const at::Tensor& wire, const BlockFormat& format);
at::Tensor wire_payload(const at::Tensor& wire, const BlockFormat& format);

}  // namespace accelerate::quantize
