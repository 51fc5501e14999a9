// The one summation kernel of the shared-memory collectives: elements added
// in rank order, ((x0 + x1) + x2) ..., one add at a time in the tensor's own
// dtype, so that every rank that sums the same inputs gets the same bits,
// whatever piece or bucket they travel in.
#pragma once

#include <cstdint>
#include <vector>

#include <c10/core/ScalarType.h>

namespace accelerate {
namespace detail {

// Whether sum_in_rank_order adds `dtype`: float, double, half (each add
// rounded to half, as Gloo does), int32 and int64 (wrapping, not
// overflowing).
bool sums_in_rank_order(at::ScalarType dtype);

// out[i] = sources[0][i] + sources[1][i] + ... for i < count (at least two
// sources), also written to `also` unless it is null. `out` and `also` may
// be one of the sources: each block is summed completely before it is
// written.
void sum_in_rank_order(at::ScalarType dtype, const std::vector<const char*>& sources,
                       std::int64_t count, char* also, char* out);

}  // namespace detail
}  // namespace accelerate
