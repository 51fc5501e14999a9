#include "accelerate/backend.h"

namespace accelerate {

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::kNone: return "none";
    case Backend::kGloo: return "gloo";
    case Backend::kNccl: return "nccl";
  }
  return "?";
}

}  // namespace accelerate
