// Exceptions thrown by accelerate-cpp. Every message is one line that names
// the problem (and, for distributed failures, the rank and the operation).
#pragma once

#include <stdexcept>
#include <string>

namespace accelerate {

// Base class of everything this library throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad settings: environment variables, options, flags, config files.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A collective or the rendezvous failed: a peer did not arrive in time, the
// connection broke, or (in debug mode) ranks called it with different shapes.
class DistributedError : public Error {
 public:
  using Error::Error;
};

}  // namespace accelerate
