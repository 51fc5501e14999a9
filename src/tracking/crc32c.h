// CRC32C (Castagnoli, reflected polynomial 0x82F63B78) and the "masked" form
// TFRecord frames store (docs/tracking.md). A table-driven byte-at-a-time
// version: event files are small, so speed does not matter here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace accelerate {
namespace tracking {

// CRC32C of `data`, continuing from `crc` (0 to start).
std::uint32_t crc32c_extend(std::uint32_t crc, const void* data, std::size_t size);
inline std::uint32_t crc32c(std::string_view data) {
  return crc32c_extend(0, data.data(), data.size());
}

// TFRecord's mask, so a CRC of data that itself contains CRCs stays strong:
// rotate right by 15 bits and add a constant.
inline std::uint32_t mask_crc(std::uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace tracking
}  // namespace accelerate
