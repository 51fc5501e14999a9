// Small socket helpers for choosing the address Gloo binds to.
#pragma once

#include <string>

namespace accelerate {
namespace detail {

// True for "localhost" and 127.0.0.0/8 / ::1 literals.
bool is_loopback_host(const std::string& host);

// The local IP address the kernel would use to reach host:port (a UDP
// "connect" sends nothing). Empty when the host cannot be resolved or routed.
std::string local_address_towards(const std::string& host, int port);

}  // namespace detail
}  // namespace accelerate
