#include "accelerate/distributed/communicator.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <iostream>
#include <mutex>
#include <string>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "accelerate/common/errors.h"
#include "accelerate/detail/enum_names.h"
#include "common/settings.h"
#include "compat/c10d_compat.h"
#include "compat/tcp_store_client.h"
#include "distributed/communicator_impl.h"
#include "distributed/failure_diagnosis.h"
#include "distributed/network.h"
#include "distributed/shared_memory_collectives.h"

namespace accelerate {

JobState current_job_state(const JobOptions& options,
                           const std::optional<Environment>& environment) {
  Hardware hardware;
  hardware.cuda_device_count = static_cast<int>(at::detail::getCUDAHooks().getNumGPUs());
  hardware.nccl_available = compat::kHasNccl;
  return JobState::from_environment(environment ? *environment : current_environment(), options,
                                    hardware);
}

const char* to_string(ReduceOp op) {
  static constexpr detail::EnumName<ReduceOp> kReduceOpNames[] = {{ReduceOp::kSum, "sum"},
                                                                  {ReduceOp::kMean, "mean"},
                                                                  {ReduceOp::kMax, "max"},
                                                                  {ReduceOp::kMin, "min"}};
  static_assert(detail::names_are_distinct(kReduceOpNames));
  return detail::enum_name(kReduceOpNames, op, "?");
}

PendingCollective::PendingCollective(std::shared_ptr<State> state) : state_(std::move(state)) {}

PendingCollective PendingCollective::then(std::function<void()> after) && {
  auto state = std::make_shared<State>();
  state->then = [first = std::move(*this), after = std::move(after)]() mutable {
    first.wait();
    after();
  };
  state->on_failure = [](const std::exception&) { throw; };  // already a DistributedError
  return PendingCollective(std::move(state));
}

void PendingCollective::wait() {
  if (!state_) return;
  auto state = std::move(state_);
  try {
    for (auto& work : state->works) work->wait();
    if (state->shared_memory) {
      state->shared_memory->wait();
    }
    if (state->then) state->then();
  } catch (const std::exception& cause) {
    state->on_failure(cause);
  }
}

namespace detail {

namespace {

// The machine of every rank of `job` (node_rank), in rank order.
std::vector<int> machines_of_ranks(compat::Backend& gloo, const JobState& job) {
  if (job.num_nodes == 1) return std::vector<int>(static_cast<std::size_t>(job.world_size), 0);
  std::vector<at::Tensor> mine{at::full({1}, job.node_rank, at::kInt)};
  std::vector<std::vector<at::Tensor>> all(1);
  for (int r = 0; r < job.world_size; ++r) all[0].push_back(at::empty({1}, at::kInt));
  gloo.allgather(all, mine)->wait();
  std::vector<int> nodes;
  for (const auto& node : all[0]) nodes.push_back(node.item<int>());
  return nodes;
}

// Registers `impl`'s counters in `ledger` (or a new ledger, the job's).
void count_traffic(Communicator::Impl& impl, std::vector<int> nodes, const std::string& label,
                   std::shared_ptr<TrafficLedger> ledger) {
  std::vector<int> job_ranks = impl.members;
  if (job_ranks.empty()) {
    for (int r = 0; r < impl.job.world_size; ++r) job_ranks.push_back(r);
  }
  impl.ledger = ledger ? std::move(ledger) : std::make_shared<TrafficLedger>();
  impl.traffic = impl.ledger->add(label.empty() ? "job" : label, std::move(job_ranks),
                                  std::move(nodes), impl.job.rank);
}

}  // namespace

std::unique_ptr<Communicator::Impl> form_single(JobState job, std::vector<int> members,
                                                std::string label,
                                                std::shared_ptr<TrafficLedger> ledger) {
  auto impl = std::make_unique<Communicator::Impl>();
  impl->job = std::move(job);
  impl->members = std::move(members);
  count_traffic(*impl, {0}, label, std::move(ledger));
  return impl;
}

std::unique_ptr<Communicator::Impl> form_groups(JobState job, c10::intrusive_ptr<c10d::Store> store,
                                                const std::string& gloo_hostname,
                                                std::vector<int> members, std::vector<int> nodes,
                                                std::string label,
                                                std::shared_ptr<TrafficLedger> ledger) {
  auto impl = std::make_unique<Communicator::Impl>();
  impl->job = std::move(job);
  impl->store = std::move(store);
  impl->members = std::move(members);
  impl->gloo_hostname = gloo_hostname;
  const JobState& j = impl->job;
  impl->diagnosis = std::make_shared<detail::FailureDiagnosis>(impl->store, j.rank, j.world_size,
                                                               j.timeout, impl->members, label);
  try {
    impl->diagnosis->mark_arrived();
    auto gloo_store = c10::make_intrusive<c10d::PrefixStore>("gloo", impl->store);
    impl->gloo = compat::make_gloo(gloo_store, j.rank, j.world_size, j.timeout, gloo_hostname,
                                   j.gloo_socket_ifname);
    // Gloo's connection set-up can finish on one rank while a peer is still
    // completing its side; a rank that returned and closed its sockets at
    // once (a short program, a test rank with nothing to do) would then fail
    // the peer's set-up with "connection closed by peer". Nobody leaves
    // before everyone is connected.
    impl->gloo->barrier()->wait();
    if (nodes.empty()) nodes = machines_of_ranks(*impl->gloo, j);
    count_traffic(*impl, std::move(nodes), label, std::move(ledger));
    if (j.num_nodes == 1) {
      // Every rank takes part, even one that turned it off, so that all
      // agree (one rank's setting must not leave the others waiting).
      std::string why_not;
      impl->shared_memory = detail::SharedMemoryCollectives::create(
          *impl->store, j.rank, j.world_size, j.timeout, j.shared_memory_all_reduce, &why_not);
      if (!impl->shared_memory && j.rank == 0 && j.shared_memory_all_reduce) {
        std::cerr << "accelerate: note: CPU all-reduces go through Gloo, not shared memory: "
                  << why_not << " (" << settings::kSharedMemoryAllReduce.variable()
                  << "=0 silences this)\n";
      }
    }
    if (j.backend == Backend::kNccl) {
      auto nccl_store = c10::make_intrusive<c10d::PrefixStore>("nccl", impl->store);
      impl->nccl = compat::make_nccl(nccl_store, j.rank, j.world_size, j.timeout);
      if (!impl->nccl) {
        throw ConfigError("backend \"nccl\" requested but this LibTorch has no NCCL");
      }
    }
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& cause) {
    throw DistributedError(impl->diagnosis->explain_rendezvous(detail::first_line_of(cause)));
  }
  return impl;
}

}  // namespace detail

namespace {

// The whole job's groups, in the store's "accelerate" section.
std::unique_ptr<Communicator::Impl> form_job_groups(JobState job,
                                                    c10::intrusive_ptr<c10d::Store> store,
                                                    const std::string& gloo_hostname) {
  return detail::form_groups(std::move(job),
                             c10::make_intrusive<c10d::PrefixStore>("accelerate", std::move(store)),
                             gloo_hostname, {}, {}, "", nullptr);
}

std::string gloo_hostname_for(const JobState& job) {
  if (detail::is_loopback_host(job.master_addr)) return "127.0.0.1";
  // Bind where the route to the master leaves this machine: the machine's
  // hostname may resolve to 127.0.1.1 (Debian's /etc/hosts), which peers on
  // other machines cannot reach.
  return detail::local_address_towards(job.master_addr, job.master_port);
}

// torchrun 2.x's agent already serves MASTER_PORT: every rank joins it, in
// its attempt's section (a restarted group must not read the keys of the
// attempt before it, which the agent's store still holds).
c10::intrusive_ptr<c10d::Store> join_launcher_store(const JobState& job) {
  const std::string where = job.master_addr + ":" + std::to_string(job.master_port);
  try {
    auto store = compat::connect_torch2_store(job.master_addr, job.master_port, job.timeout);
    return c10::make_intrusive<c10d::PrefixStore>(job.rendezvous_store_prefix(), std::move(store));
  } catch (const std::exception& cause) {
    throw DistributedError("rank " + std::to_string(job.rank) +
                           ": could not join torchrun's rendezvous store at " + where + ": " +
                           detail::first_line_of(cause) +
                           " (TORCHELASTIC_USE_AGENT_STORE=True says torchrun's agent serves it; "
                           "is the agent still running?)");
  }
}

c10::intrusive_ptr<c10d::Store> connect_store(const JobState& job) {
  if (job.launcher_hosts_store) return join_launcher_store(job);
  const bool is_server = job.rank == 0;
  try {
    return compat::make_tcp_store(job.master_addr, job.master_port, is_server, job.world_size,
                                  job.timeout);
  } catch (const std::exception& cause) {
    std::string reason = detail::first_line_of(cause);
    if (reason.find("Address already in use") != std::string::npos) {
      reason = "address already in use";
    }
    const std::string where = job.master_addr + ":" + std::to_string(job.master_port);
    if (is_server) {
      throw DistributedError("rank 0: cannot host the rendezvous store on " + where + ": " +
                             reason + " (is another job using MASTER_PORT " +
                             std::to_string(job.master_port) + "? choose another port)");
    }
    throw DistributedError("rank " + std::to_string(job.rank) +
                           ": could not reach the rendezvous store at " + where + " within " +
                           detail::format_seconds(job.timeout) + ": " + reason +
                           " (is rank 0 running, and are MASTER_ADDR/MASTER_PORT right?)");
  }
}

}  // namespace

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

Communicator::Impl::~Impl() {
  if (!nccl) return;
  // A destructor must not throw: an NCCL group already broken (a peer gone)
  // can fail its shutdown, and then its own destructor's fallback frees it.
  try {
    compat::shutdown(*nccl);
  } catch (const std::exception&) {
  }
}

std::shared_ptr<Communicator> Communicator::connect(const JobState& job) {
  if (job.world_size == 1) {
    return std::shared_ptr<Communicator>(
        new Communicator(detail::form_single(job, {}, "", nullptr)));
  }
  auto store = connect_store(job);
  return std::shared_ptr<Communicator>(
      new Communicator(form_job_groups(job, std::move(store), gloo_hostname_for(job))));
}

std::shared_ptr<Communicator> Communicator::connect_through_file(const std::string& path,
                                                                 const JobState& job,
                                                                 const std::string& hostname) {
  if (job.world_size == 1) return connect(job);
  auto store = c10::make_intrusive<c10d::FileStore>(path, job.world_size);
  store->setTimeout(job.timeout);
  return std::shared_ptr<Communicator>(
      new Communicator(form_job_groups(job, std::move(store), hostname)));
}

const JobState& Communicator::job() const { return impl_->job; }

std::vector<GroupTraffic> Communicator::traffic() const { return impl_->ledger->snapshot(); }

void Communicator::reset_traffic() { impl_->ledger->reset(); }

bool Communicator::sums_cpu_tensors_in_shared_memory() const {
  return impl_->shared_memory != nullptr;
}

void Communicator::all_reduce(at::Tensor& tensor, ReduceOp op) {
  if (op == ReduceOp::kMean && at::isIntegralType(tensor.scalar_type(), /*includeBool=*/true)) {
    throw Error("reduce(mean) needs a floating-point tensor, got " +
                std::string(c10::toString(tensor.scalar_type())));
  }
  if (impl_->single()) return;
  impl_->run(std::string("all_reduce(") + to_string(op) + ")", [&] {
    bool stage_on_host = false;
    compat::Backend& backend = impl_->backend_for(tensor, &stage_on_host);
    const bool via_gloo = &backend == impl_->gloo.get();
    // Gloo has no bool or bfloat16 reductions: reduce a widened copy.
    at::ScalarType wire_type = tensor.scalar_type();
    if (via_gloo && wire_type == at::kBool) wire_type = at::kInt;
    if (via_gloo && wire_type == at::kBFloat16) wire_type = at::kFloat;
    at::Tensor wire = tensor;
    if (stage_on_host || wire_type != tensor.scalar_type() || !tensor.is_contiguous()) {
      wire = tensor
                 .to(stage_on_host ? at::kCPU : tensor.device(), wire_type,
                     /*non_blocking=*/false, /*copy=*/true)
                 .contiguous();
    }
    const bool sum = op == ReduceOp::kSum || op == ReduceOp::kMean;  // mean: sum, then divide
    if (sum && impl_->sums_in_shared_memory(wire)) {
      impl_->count_all_reduce(Transport::kSharedMemory, wire);
      impl_->shared_memory->sum_async(wire, "all_reduce")->wait();
    } else {
      impl_->count_all_reduce(impl_->transport_of(backend), wire);
      c10d::AllreduceOptions options;
      options.reduceOp = op == ReduceOp::kMax   ? c10d::ReduceOp::MAX
                         : op == ReduceOp::kMin ? c10d::ReduceOp::MIN
                                                : c10d::ReduceOp::SUM;
      std::vector<at::Tensor> tensors{wire};
      backend.allreduce(tensors, options)->wait();
    }
    if (op == ReduceOp::kMean) wire.div_(impl_->job.world_size);
    if (!wire.is_same(tensor)) tensor.copy_(wire);
  });
}

bool Communicator::reduces_natively(at::ScalarType dtype, c10::Device device) const {
  if (impl_->single()) return true;
  if (device.is_cuda() && impl_->nccl) return true;
  return dtype != at::kBFloat16 && dtype != at::kBool;
}

PendingCollective Communicator::all_reduce_sum_async(at::Tensor& tensor, const std::string& what) {
  if (impl_->single()) return {};
  bool stage_on_host = false;
  compat::Backend& backend = impl_->backend_for(tensor, &stage_on_host);
  if (stage_on_host || !tensor.is_contiguous()) {
    throw Error("all_reduce_sum_async needs a contiguous tensor on a device its backend serves");
  }
  return impl_->start_async(what, [&](PendingCollective::State& state) {
    if (impl_->sums_in_shared_memory(tensor)) {
      impl_->count_all_reduce(Transport::kSharedMemory, tensor);
      state.shared_memory = impl_->shared_memory->sum_async(tensor, what);
      return;
    }
    impl_->count_all_reduce(impl_->transport_of(backend), tensor);
    std::vector<at::Tensor> tensors{tensor};
    state.works.push_back(backend.allreduce(tensors, c10d::AllreduceOptions()));
  });
}

std::vector<at::Tensor> Communicator::all_gather_same_shape(const at::Tensor& tensor) {
  if (impl_->single()) return {tensor};
  std::vector<at::Tensor> gathered;
  impl_->run("all_gather", [&] {
    bool stage_on_host = false;
    compat::Backend& backend = impl_->backend_for(tensor, &stage_on_host);
    at::Tensor source = stage_on_host ? tensor.cpu() : tensor;
    // Moved as raw bytes, so every dtype works on every backend.
    at::Tensor bytes = source.contiguous().reshape({-1}).view(at::kByte);
    std::vector<at::Tensor> outputs;
    for (int r = 0; r < impl_->job.world_size; ++r) outputs.push_back(at::empty_like(bytes));
    if (bytes.numel() > 0) {
      // A ring: every other rank's bytes pass through this one once.
      impl_->traffic->count_ring(TrafficKind::kAllGather, impl_->transport_of(backend),
                                 static_cast<std::uint64_t>(bytes.numel()) *
                                     static_cast<std::uint64_t>(impl_->job.world_size - 1));
      std::vector<std::vector<at::Tensor>> output_lists{outputs};
      std::vector<at::Tensor> inputs{bytes};
      backend.allgather(output_lists, inputs)->wait();
      outputs = output_lists[0];
    }
    for (auto& out : outputs) {
      gathered.push_back(
          out.view(tensor.scalar_type()).reshape(tensor.sizes()).to(tensor.device()));
    }
  });
  return gathered;
}

std::vector<std::string> Communicator::all_gather_bytes(const std::string& bytes) {
  if (impl_->single()) return {bytes};
  auto length = at::full({1}, static_cast<int64_t>(bytes.size()), at::kLong);
  auto lengths = all_gather_same_shape(length);
  int64_t longest = 0;
  for (auto& l : lengths) longest = std::max(longest, l.item<int64_t>());
  auto padded = at::zeros({longest}, at::kByte);
  std::memcpy(padded.data_ptr(), bytes.data(), bytes.size());
  auto gathered = all_gather_same_shape(padded);
  std::vector<std::string> result;
  for (size_t r = 0; r < gathered.size(); ++r) {
    const auto* data = static_cast<const char*>(gathered[r].data_ptr());
    result.emplace_back(data, static_cast<size_t>(lengths[r].item<int64_t>()));
  }
  return result;
}

void Communicator::broadcast(at::Tensor& tensor, int from_process) {
  if (from_process < 0 || from_process >= world_size()) {
    throw Error("broadcast from process " + std::to_string(from_process) +
                ", but the job has processes 0.." + std::to_string(world_size() - 1));
  }
  if (impl_->single()) return;
  impl_->run("broadcast from rank " + std::to_string(from_process), [&] {
    bool stage_on_host = false;
    compat::Backend& backend = impl_->backend_for(tensor, &stage_on_host);
    at::Tensor wire = stage_on_host ? tensor.cpu() : tensor.contiguous();
    at::Tensor bytes = wire.reshape({-1}).view(at::kByte);
    if (bytes.numel() > 0) {
      impl_->traffic->count_broadcast(impl_->transport_of(backend),
                                      static_cast<std::uint64_t>(bytes.numel()), from_process);
      c10d::BroadcastOptions options;
      options.rootRank = from_process;
      std::vector<at::Tensor> tensors{bytes};
      backend.broadcast(tensors, options)->wait();
    }
    if (!wire.is_same(tensor)) tensor.copy_(wire);
  });
}

void Communicator::barrier() {
  if (impl_->single()) return;
  impl_->run("barrier", [&] { impl_->gloo->barrier()->wait(); });
}

}  // namespace accelerate
