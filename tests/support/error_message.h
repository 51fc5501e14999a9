// The one-line message of the accelerate::Error a call throws, for tests that
// check what a user would read.
#pragma once

#include <functional>
#include <string>

#include "accelerate/common/errors.h"

namespace accelerate::testing {

// What `fn` throws as accelerate::Error, or "(no error)" when it returns.
// Other exceptions pass through (the test then fails with them).
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

}  // namespace accelerate::testing
