// Autocast's thread-local state, one spelling for every LibTorch: 1.13 has a
// function per device (set_cpu_enabled, set_autocast_cpu_dtype, ...), 2.4+
// has device-generic ones and deprecates the old (warnings at compile and run time).
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace accelerate {
namespace compat {

// Devices autocast knows here: kCPU and kCUDA. Others throw Error.
bool autocast_enabled(c10::DeviceType device);
void set_autocast_enabled(c10::DeviceType device, bool enabled);
c10::ScalarType autocast_dtype(c10::DeviceType device);
void set_autocast_dtype(c10::DeviceType device, c10::ScalarType dtype);

// Makes CPU autocast compute layer_norm in fp32 where LibTorch's kernel
// refuses a bf16 input with fp32 weights (1.13); nothing where it takes them.
// Once per process; AutocastGuard calls it for CPU autocast.
void ensure_cpu_autocast_layer_norm();

}  // namespace compat
}  // namespace accelerate
