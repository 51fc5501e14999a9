// The one place that knows how c10d differs between LibTorch releases. Its
// switches come from cmake/TorchCompatProbes.cmake (feature probes of the
// LibTorch in use), never from version numbers.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "accelerate_compat_config.h"

namespace accelerate {
namespace compat {

// The class that concrete process groups (Gloo, NCCL) derive from:
// c10d::ProcessGroup up to 1.13, c10d::Backend from 2.0 on. We never use
// 2.x's dispatching ProcessGroup wrapper (its constructor keeps changing).
#if ACCELERATE_COMPAT_BACKEND_BASE
using Backend = c10d::Backend;
#else
using Backend = c10d::ProcessGroup;
#endif

using Work = c10d::Work;

// Whether this LibTorch has the NCCL process group compiled in.
constexpr bool kHasNccl = ACCELERATE_COMPAT_HAS_NCCL != 0;

// A TCPStore server (is_server) or client, connected within `timeout`.
// Uses only the (host, options) constructor and assigns option fields by name
// (fields were added between releases).
c10::intrusive_ptr<c10d::Store> make_tcp_store(const std::string& host, int port, bool is_server,
                                               int world_size, std::chrono::milliseconds timeout);

// A Gloo process group over `store`. The network device: interface
// `ifname` when not empty (JobState::gloo_socket_ifname, from
// GLOO_SOCKET_IFNAME), else the one that reaches `hostname`, else Gloo's default.
c10::intrusive_ptr<Backend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                      int world_size, std::chrono::milliseconds timeout,
                                      const std::string& hostname, const std::string& ifname);

// An NCCL process group, or nullptr when this LibTorch has none.
c10::intrusive_ptr<Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                      int world_size, std::chrono::milliseconds timeout);

// Tears down `backend`'s communicators now, as Python's
// destroy_process_group does (Backend::shutdown, 2.x). Without it 2.x's
// ProcessGroupNCCL warns at destruction that it was never shut down; 1.13
// has no such call and frees everything in its destructor.
void shutdown(Backend& backend);

}  // namespace compat
}  // namespace accelerate
