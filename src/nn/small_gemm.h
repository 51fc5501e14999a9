// The library's own float matrix product for the small products of
// attention's blocks (internal to the nn area).
//
// OpenBLAS runs a [64 x 64] x [64 x 256] product at a third to a half of the
// core's peak: its packing and dispatch are sized for large matrices, and
// every call pays them. Here both operands are read through strides (a
// transposed operand costs nothing extra), packed once into panels, and
// multiplied by one AVX-512 register tile of 8 x 32 floats.
#pragma once

#include <cstdint>
#include <vector>

namespace accelerate {
namespace detail {

// A read-only float matrix: element (i, j) is data[i * row_stride + j * col_stride].
struct StridedMatrix {
  const float* data;
  int64_t rows, cols, row_stride, col_stride;

  StridedMatrix transposed() const { return {data, cols, rows, col_stride, row_stride}; }
};

// Whether callers take small_gemm on this CPU: an x86-64 build (GCC or
// Clang) whose kernel_capability() is avx512 (a CPU with AVX-512, not capped
// lower), where it was measured faster than OpenBLAS on attention's products
// (docs/kernels.md). Elsewhere they keep LibTorch's products; on x86-64 it
// must not be called without AVX-512.
bool small_gemm_preferred();

// out[i * out_row_stride + j] = (a b)[i, j], or += with accumulate, for
// a [m x k] and b [k x n]; out's columns are contiguous. scratch holds the
// packed operands (grown as needed, reused across calls).
void small_gemm(const StridedMatrix& a, const StridedMatrix& b, float* out, int64_t out_row_stride,
                bool accumulate, std::vector<float>& scratch);

}  // namespace detail
}  // namespace accelerate
