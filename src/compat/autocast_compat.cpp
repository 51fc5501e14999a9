#include "compat/autocast_compat.h"

#include <ATen/autocast_mode.h>

#include <string>

#include "accelerate/common/errors.h"
#include "accelerate_compat_config.h"

namespace accelerate {
namespace compat {
namespace {

void require_known(c10::DeviceType device) {
  if (device != c10::kCPU && device != c10::kCUDA) {
    throw Error("autocast is available on cpu and cuda devices, not " +
                c10::DeviceTypeName(device, /*lower_case=*/true));
  }
}

}  // namespace

#if ACCELERATE_COMPAT_DEVICE_AUTOCAST

bool autocast_enabled(c10::DeviceType device) {
  require_known(device);
  return at::autocast::is_autocast_enabled(device);
}
void set_autocast_enabled(c10::DeviceType device, bool enabled) {
  require_known(device);
  at::autocast::set_autocast_enabled(device, enabled);
}
c10::ScalarType autocast_dtype(c10::DeviceType device) {
  require_known(device);
  return at::autocast::get_autocast_dtype(device);
}
void set_autocast_dtype(c10::DeviceType device, c10::ScalarType dtype) {
  require_known(device);
  at::autocast::set_autocast_dtype(device, dtype);
}

#else

bool autocast_enabled(c10::DeviceType device) {
  require_known(device);
  return device == c10::kCPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
void set_autocast_enabled(c10::DeviceType device, bool enabled) {
  require_known(device);
  if (device == c10::kCPU) {
    at::autocast::set_cpu_enabled(enabled);
  } else {
    at::autocast::set_enabled(enabled);
  }
}
c10::ScalarType autocast_dtype(c10::DeviceType device) {
  require_known(device);
  return device == c10::kCPU ? at::autocast::get_autocast_cpu_dtype()
                             : at::autocast::get_autocast_gpu_dtype();
}
void set_autocast_dtype(c10::DeviceType device, c10::ScalarType dtype) {
  require_known(device);
  if (device == c10::kCPU) {
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
}

#endif

}  // namespace compat
}  // namespace accelerate
