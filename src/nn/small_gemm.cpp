#include "nn/small_gemm.h"

#include <algorithm>
#include <cstring>

#include "accelerate/common/cpu_capability.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

// The kernel is written with GCC/Clang vector types of 16 floats and built
// for AVX-512 F on x86-64, where one such vector is one register; the
// callers reach it only on a CPU that has AVX-512 (small_gemm_preferred).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ACCELERATE_SMALL_GEMM_X86 1
#define ACCELERATE_AVX512 __attribute__((target("avx512f")))
#else
#define ACCELERATE_SMALL_GEMM_X86 0
#define ACCELERATE_AVX512
#endif

namespace accelerate {
namespace detail {
namespace {

// The register tile: 8 rows of 32 columns, 16 accumulators of 16 floats,
// two loads of b and 8 broadcasts of a per 16 fused multiply-adds (of the
// 32 AVX-512 registers, 18 hold the tile and b's row).
constexpr int64_t kTileRows = 8;
constexpr int64_t kTileCols = 32;
constexpr int64_t kVector = 16;

// Values (registers, and locals of the natural 64-byte alignment, which
// the compiler then keeps) and the view through which any float address is
// read or written (unaligned, aliasing floats).
typedef float Vec16 __attribute__((vector_size(64)));
typedef float FloatsAsVec16 __attribute__((vector_size(64), aligned(4), may_alias));

ACCELERATE_AVX512 inline Vec16 load(const float* p) {
  return *reinterpret_cast<const FloatsAsVec16*>(p);
}
ACCELERATE_AVX512 inline void store(Vec16 v, float* p) { *reinterpret_cast<FloatsAsVec16*>(p) = v; }

int64_t panels(int64_t extent, int64_t width) { return (extent + width - 1) / width; }

// a's rows [first, first + kTileRows) as depth x kTileRows floats, k-major
// (a tile's 8 values of one k side by side); rows past the end are 0.
ACCELERATE_AVX512 void pack_row_panel(const StridedMatrix& a, int64_t first, float* packed) {
  const int64_t rows = std::min(kTileRows, a.rows - first), depth = a.cols;
  for (int64_t k = 0; k < depth; ++k) {
    const float* values = a.data + k * a.col_stride + first * a.row_stride;
    float* out = packed + k * kTileRows;
    for (int64_t i = 0; i < rows; ++i) out[i] = values[i * a.row_stride];
    for (int64_t i = rows; i < kTileRows; ++i) out[i] = 0.0f;
  }
}

#if ACCELERATE_SMALL_GEMM_X86
// out[k * out_stride + i] = in[i * in_stride + k] for i, k < 16, through
// registers: unpacks pair rows, shuffles gather each 128-bit lane's four
// columns, two rounds of lane shuffles put the lanes in order (a
// transposed b is otherwise read one float at a time).
ACCELERATE_AVX512 void transpose_16x16(const float* in, int64_t in_stride, float* out,
                                       int64_t out_stride) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(in + i * in_stride);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  // r[4g + c], lane L: column 4L + c of rows 4g .. 4g + 3.
  for (int g = 0; g < 16; g += 4) {
    r[g] = _mm512_shuffle_ps(t[g], t[g + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int c = 0; c < 4; ++c) {
    t[c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);
    t[4 + c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);
    t[8 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
  }
  for (int c = 0; c < 4; ++c) {
    _mm512_storeu_ps(out + c * out_stride, _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88));
    _mm512_storeu_ps(out + (8 + c) * out_stride, _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd));
    _mm512_storeu_ps(out + (4 + c) * out_stride, _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0x88));
    _mm512_storeu_ps(out + (12 + c) * out_stride, _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0xdd));
  }
}
#endif

// b's columns [first, first + kTileCols) as depth x kTileCols floats,
// row by row; columns past the end are 0.
ACCELERATE_AVX512 void pack_column_panel(const StridedMatrix& b, int64_t first, float* packed) {
  const int64_t cols = std::min(kTileCols, b.cols - first), depth = b.rows;
  if (b.col_stride == 1) {
    for (int64_t k = 0; k < depth; ++k) {
      const float* row = b.data + k * b.row_stride + first;
      float* out = packed + k * kTileCols;
      for (int64_t j = 0; j < cols; ++j) out[j] = row[j];
      for (int64_t j = cols; j < kTileCols; ++j) out[j] = 0.0f;
    }
  } else {
    int64_t transposed = 0;  // rows of the panel filled by transpose_16x16
#if ACCELERATE_SMALL_GEMM_X86
    if (b.row_stride == 1 && cols == kTileCols) {
      for (; transposed + 16 <= depth; transposed += 16) {
        for (int64_t half = 0; half < kTileCols; half += 16) {
          transpose_16x16(b.data + (first + half) * b.col_stride + transposed, b.col_stride,
                          packed + transposed * kTileCols + half, kTileCols);
        }
      }
    }
#endif
    for (int64_t j = 0; j < cols; ++j) {
      const float* column = b.data + (first + j) * b.col_stride;
      for (int64_t k = transposed; k < depth; ++k) {
        packed[k * kTileCols + j] = column[k * b.row_stride];
      }
    }
    for (int64_t j = cols; j < kTileCols; ++j) {
      for (int64_t k = 0; k < depth; ++k) packed[k * kTileCols + j] = 0.0f;
    }
  }
}

// One register tile: out[0:rows, 0:cols] (=|+=) a[0:8, :] b[:, 0:32], with
// a(i, k) = a[i * a_row_stride + k * a_depth_stride] (8 broadcasts per k,
// from 8 row streams or one packed row) and b a packed panel (row k: 32
// floats at b + 32 k).
ACCELERATE_AVX512 void multiply_tile(int64_t depth, const float* a, int64_t a_row_stride,
                                     int64_t a_depth_stride, const float* b, float* out,
                                     int64_t out_row_stride, int64_t rows, int64_t cols,
                                     bool accumulate) {
  Vec16 sum[kTileRows][2];
  for (auto& row : sum) row[0] = row[1] = Vec16{};
  for (int64_t k = 0; k < depth; ++k) {
    const Vec16 left = load(b + k * kTileCols), right = load(b + k * kTileCols + kVector);
    const float* a_k = a + k * a_depth_stride;
    for (int64_t i = 0; i < kTileRows; ++i) {
      const float a_ik = a_k[i * a_row_stride];
      sum[i][0] += a_ik * left;
      sum[i][1] += a_ik * right;
    }
  }
  if (rows == kTileRows && cols == kTileCols) {
    for (int64_t i = 0; i < kTileRows; ++i) {
      float* row = out + i * out_row_stride;
      store(accumulate ? load(row) + sum[i][0] : sum[i][0], row);
      store(accumulate ? load(row + kVector) + sum[i][1] : sum[i][1], row + kVector);
    }
    return;
  }
  float tile[kTileRows][kTileCols];
  for (int64_t i = 0; i < rows; ++i) {
    std::memcpy(tile[i], &sum[i][0], sizeof(Vec16));
    std::memcpy(tile[i] + kVector, &sum[i][1], sizeof(Vec16));
    float* row = out + i * out_row_stride;
    for (int64_t j = 0; j < cols; ++j) row[j] = accumulate ? row[j] + tile[i][j] : tile[i][j];
  }
}

}  // namespace

bool small_gemm_preferred() {
#if ACCELERATE_SMALL_GEMM_X86
  return kernel_capability() == CpuCapability::kAvx512;
#else
  return false;
#endif
}

ACCELERATE_AVX512 void small_gemm(const StridedMatrix& a, const StridedMatrix& b, float* out,
                                  int64_t out_row_stride, bool accumulate,
                                  std::vector<float>& scratch) {
  const int64_t depth = a.cols;
  if (a.rows == 0 || b.cols == 0) return;
  if (depth == 0) {
    if (accumulate) return;
    for (int64_t i = 0; i < a.rows; ++i) std::fill_n(out + i * out_row_stride, b.cols, 0.0f);
    return;
  }
  // b is always packed: read in place, the rows of a head's keys or values
  // lie a whole fused projection apart (4.5 KiB in GPT small), so a panel's
  // rows fall in a few cache sets and on a new page each. a is read in
  // place when row-major (8 streams along its rows); else (a transposed
  // operand, whose 8 values of one k lie in one row of the storage, or rows
  // past a tile's edge) it is packed k-major, 8 floats per k.
  const int64_t row_tiles = panels(a.rows, kTileRows), column_panels = panels(b.cols, kTileCols);
  const bool a_in_place = a.col_stride == 1 && a.rows % kTileRows == 0;
  const size_t a_size = a_in_place ? 0 : static_cast<size_t>(row_tiles * kTileRows * depth);
  scratch.resize(a_size + static_cast<size_t>(column_panels * kTileCols * depth));
  float* packed_a = scratch.data();
  float* packed_b = packed_a + a_size;
  if (!a_in_place) {
    for (int64_t r = 0; r < row_tiles; ++r) {
      pack_row_panel(a, r * kTileRows, packed_a + r * kTileRows * depth);
    }
  }
  for (int64_t c = 0; c < column_panels; ++c) {
    pack_column_panel(b, c * kTileCols, packed_b + c * kTileCols * depth);
  }
  // Column panels outside: one panel of b (depth x 32 floats) stays in the
  // nearest cache while every row tile of a passes it.
  for (int64_t c = 0; c < column_panels; ++c) {
    const int64_t first_col = c * kTileCols, cols = std::min(kTileCols, b.cols - first_col);
    for (int64_t r = 0; r < row_tiles; ++r) {
      const int64_t first_row = r * kTileRows, rows = std::min(kTileRows, a.rows - first_row);
      const float* a_tile =
          a_in_place ? a.data + first_row * a.row_stride : packed_a + r * kTileRows * depth;
      multiply_tile(depth, a_tile, a_in_place ? a.row_stride : 1, a_in_place ? 1 : kTileRows,
                    packed_b + c * kTileCols * depth, out + first_row * out_row_stride + first_col,
                    out_row_stride, rows, cols, accumulate);
    }
  }
}

}  // namespace detail
}  // namespace accelerate
