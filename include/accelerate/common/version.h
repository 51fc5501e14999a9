#pragma once

#define ACCELERATE_VERSION_MAJOR 0
#define ACCELERATE_VERSION_MINOR 1
#define ACCELERATE_VERSION_PATCH 0

namespace accelerate {
constexpr const char* kVersion = "0.1.0";
}  // namespace accelerate
