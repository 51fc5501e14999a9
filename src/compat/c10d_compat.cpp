#include "compat/c10d_compat.h"

#include <cstdlib>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if ACCELERATE_COMPAT_HAS_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace accelerate {
namespace compat {

c10::intrusive_ptr<c10d::Store> make_tcp_store(const std::string& host, int port, bool is_server,
                                               int world_size, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = is_server;
  options.numWorkers = static_cast<std::size_t>(world_size);
  // We check arrival ourselves (rendezvous keys), so the server does not
  // block in its constructor waiting for every worker.
  options.waitWorkers = false;
  options.timeout = timeout;
#if ACCELERATE_COMPAT_TCPSTORE_USE_LIBUV
  // 2.x defaults to the libuv server, which Debian's build lacks; the classic
  // server is available everywhere.
  options.useLibUV = false;
#endif
  return c10::make_intrusive<c10d::TCPStore>(host, options);
}

c10::intrusive_ptr<Backend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                      int world_size, std::chrono::milliseconds timeout,
                                      const std::string& hostname, const std::string& ifname) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  if (!ifname.empty()) {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  } else if (!hostname.empty()) {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(hostname));
  } else {
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
}

c10::intrusive_ptr<Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                      int world_size, std::chrono::milliseconds timeout) {
#if ACCELERATE_COMPAT_HAS_NCCL
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
#else
  (void)store, (void)rank, (void)world_size, (void)timeout;
  return {};
#endif
}

void shutdown(Backend& backend) {
#if ACCELERATE_COMPAT_BACKEND_SHUTDOWN
  backend.shutdown();
#else
  (void)backend;
#endif
}

}  // namespace compat
}  // namespace accelerate
