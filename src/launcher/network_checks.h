// Network facts a multi-machine launch depends on, checked before anything
// starts: a main address that does not resolve, or that this machine has no
// route to, otherwise shows up as every rank hanging in the rendezvous until
// the timeout with no useful message, as Accelerate's users often report.
#pragma once

#include <string>

#include "accelerate/common/environment.h"
#include "launcher/launch_options.h"

namespace accelerate::launcher {

// Throws UsageError when options.main_process_ip (not a loopback address)
// cannot be resolved or routed to from this machine; the message says what
// to change.
void check_main_address(const LaunchOptions& options);

// The network interface that holds `address` ("eth0"), or "" when none does.
std::string interface_with_address(const std::string& address);

// For jobs on several machines: sets GLOO_SOCKET_IFNAME in `env` to the
// interface on the route to the main address, unless the user set it. The
// library finds that route itself; Python programs (torch's Gloo) otherwise
// bind to whatever the host name resolves to, often 127.0.1.1 on Debian.
// Returns the interface it chose, or "".
std::string choose_gloo_interface(const LaunchOptions& options, Environment& env);

}  // namespace accelerate::launcher
