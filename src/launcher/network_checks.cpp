#include "launcher/network_checks.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "distributed/network.h"
#include "launcher/launch_errors.h"

namespace accelerate::launcher {

void check_main_address(const LaunchOptions& options) {
  const std::string& host = options.main_process_ip;
  if (detail::is_loopback_host(host)) return;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int error = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (error != 0) {
    throw UsageError(
        "--main_process_ip '" + host + "' cannot be resolved (" + gai_strerror(error) +
        "); give machine rank 0's IP address, or a host name every machine can resolve");
  }
  freeaddrinfo(found);
  if (detail::local_address_towards(host,
                                    options.main_process_port > 0 ? options.main_process_port : 1)
          .empty()) {
    throw UsageError(
        "no route from this machine to --main_process_ip " + host +
        "; check the address (it must be machine rank 0's, reachable from every machine) "
        "and this machine's network interfaces and routes");
  }
}

std::string interface_with_address(const std::string& address) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string name;
  for (ifaddrs* entry = list; entry != nullptr && name.empty(); entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr) continue;
    const int family = entry->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw =
        family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(entry->ifa_addr)->sin_addr)
            : static_cast<const void*>(
                  &reinterpret_cast<sockaddr_in6*>(entry->ifa_addr)->sin6_addr);
    if (inet_ntop(family, raw, text, sizeof(text)) != nullptr && address == text)
      name = entry->ifa_name;
  }
  freeifaddrs(list);
  return name;
}

std::string choose_gloo_interface(const LaunchOptions& options, Environment& env) {
  if (options.num_machines < 2 || lookup(env, "GLOO_SOCKET_IFNAME")) return "";
  if (detail::is_loopback_host(options.main_process_ip)) return "";
  const std::string local =
      detail::local_address_towards(options.main_process_ip, options.main_process_port);
  const std::string name = local.empty() ? "" : interface_with_address(local);
  if (!name.empty()) env["GLOO_SOCKET_IFNAME"] = name;
  return name;
}

}  // namespace accelerate::launcher
