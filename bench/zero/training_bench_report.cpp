// zero_training_bench's table: for every stage, rank 0 prints the state
// against the ZeRO formula, the peak within a step, the step time and, at
// stage 3, the gathers (training_bench.cpp describes each figure).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "accelerate/common/malloc_tuning.h"
#include "compat/memory_compat.h"
#include "zero/training_bench.h"

namespace zero_training_bench {

namespace {

// Median time of one unit's all-gather on its own, as stage 3 does it: a
// fresh buffer (stage 3 gives a freed buffer new memory) filled from every
// process's shard. The slowest rank's.
double unit_gather_ms(accelerate::Communicator& comm, double unit_numel) {
  const auto numel = static_cast<std::int64_t>(unit_numel);
  const at::Tensor shard = at::ones({numel / comm.world_size()});
  std::vector<double> times;
  for (int i = 0; i < 22; ++i) {
    comm.barrier();
    const Clock::time_point start = Clock::now();
    at::Tensor buffer = at::empty({numel});
    comm.all_gather_into(shard, buffer);
    if (i >= 2)
      times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  at::Tensor slowest = at::tensor({median(times)}, at::kDouble);
  comm.all_reduce(slowest, accelerate::ReduceOp::kMax);
  return slowest.item<double>();
}

}  // namespace

void run_rank(accelerate::Communicator& comm, std::shared_ptr<accelerate::Communicator> owner,
              const Settings& s) {
  torch::set_num_threads(1);
  one_blas_thread();
  accelerate::tune_malloc_for_training();
  // Installed once per rank process before any model exists, so every
  // parameter, gradient, optimizer state, bucket and activation is counted
  // (and stage 3's re-gather, which asks the storage's own allocator).
  accelerate::compat::install_cpu_allocation_counter();
  // The processes a shard is cut for: the job's, or a hybrid shard group's.
  const double n = s.hybrid > 0 ? s.hybrid : comm.world_size();
  const Workload shape = make_workload(s, comm.rank());
  const double psi = shape.psi, root = shape.root;
  // A unit's gathered buffer: its parameters padded to N equal shards.
  const double unit_bytes = 4 * std::ceil(shape.unit / n) * n;
  // Stage 3 shards the units' parameters; what stays outside them is
  // whole, with its gradients and optimizer state sharded (stage 2's 4+12/N).
  const double stage3 = 16 * (psi - root) / n + 4 * root + 12 * root / n;
  const double formula[] = {16 * psi, 8 * psi + 8 * psi / n, 4 * psi + 12 * psi / n, stage3};
  const char* formula_name[] = {"16Ψ", "8Ψ+8Ψ/N", "4Ψ+12Ψ/N",
                                root > 0 ? "16Ψu/N+4Ψr+12Ψr/N" : "16Ψ/N"};
  const double goal3 = stage3 + 2 * unit_bytes;
  if (comm.rank() == 0) {
    std::printf(
        "ranks=%d  %s, Ψ = %.3fM parameters (outside units Ψr = %.3fM), a unit %.2f MB, batch "
        "%d, %d steps (+2 warm-up), fp32 AdamW\n",
        comm.world_size(), shape.describe.c_str(), psi / 1e6, root / 1e6, unit_bytes / 1e6, s.batch,
        s.steps);
    if (s.reports_placement()) {
      // The bench asks for the offload copies on this CPU job unless the
      // caller set the variable (stage_options).
      const char* set = std::getenv("ACCELERATE_OFFLOAD_ON_CPU_JOB");
      const std::string copies = s.offload == Offload::kNone
                                     ? ""
                                     : std::string(" (ACCELERATE_OFFLOAD_ON_CPU_JOB=") +
                                           (set != nullptr ? set : "true") + ")";
      std::printf("ranks=%d  offload %s%s, shard groups of %d processes (the formulas' N)%s\n",
                  comm.world_size(), offload_name(s.offload), copies.c_str(), static_cast<int>(n),
                  s.hybrid > 0 ? ", FSDP hybrid sharding at stages 2 and 3" : "");
    }
    std::fflush(stdout);
  }
  const bool has_stage3 = std::count(s.stages.begin(), s.stages.end(), 3) > 0;
  const double gather_ms = has_stage3 ? unit_gather_ms(comm, unit_bytes / 4) : 0;
  std::map<int, Measured> done;
  for (int stage : s.stages) {
    const Measured m = run_stage(comm, owner, s, stage);
    done[stage] = m;
    if (comm.rank() != 0) continue;
    const double reference_ms = done.count(0) ? done[0].step_ms : m.step_ms;
    const double activations = m.activation_bytes;
    const double peak = m.state_bytes + m.step_rise_bytes();
    // "Ψ" takes two bytes and one column, so printf's widths would not align.
    std::printf(
        "ranks=%d stage %d  memory  state %8.2f MB  formula %8.2f MB = %s (%.3fx)  all tensors "
        "%8.2f MB  peak in step %8.2f MB: state +%.2f MB in forward, +%.2f in backward, +%.2f in "
        "optimizer (activations %.2f MB), + shared-memory buckets %.2f MB\n",
        comm.world_size(), stage, m.state_bytes / 1e6, formula[stage] / 1e6, formula_name[stage],
        m.state_bytes / formula[stage], m.live_bytes / 1e6, peak / 1e6, m.forward_peak_rise / 1e6,
        m.backward_peak_rise / 1e6, m.optimizer_peak_rise / 1e6, activations / 1e6,
        m.shared_bytes / 1e6);
    if (s.reports_placement()) {
      std::printf(
          "ranks=%d stage %d  where   device %8.2f MB  host %8.2f MB: parameter shards %.2f MB, "
          "gradient shards %.2f MB, Adam states %.2f MB\n",
          comm.world_size(), stage, m.device_bytes / 1e6, m.host_bytes() / 1e6,
          m.host_parameter_bytes / 1e6, m.host_gradient_bytes / 1e6, m.host_optimizer_bytes / 1e6);
    }
    const double hidden =
        m.reduce_in_flight_ms > 0 ? 1 - m.reduce_exposed_ms / m.reduce_in_flight_ms : 0;
    std::printf(
        "ranks=%d stage %d  time    step %7.2f ms (%.2fx stage 0)  forward %7.2f  backward %7.2f  "
        "optimizer %7.2f ms  gradient collectives: in flight %.2f ms, exposed %.2f ms, "
        "%.0f%% hidden\n",
        comm.world_size(), stage, m.step_ms, m.step_ms / reference_ms, m.forward_ms, m.backward_ms,
        m.optimizer_ms, m.reduce_in_flight_ms, m.reduce_exposed_ms, 100 * hidden);
    if (stage == 3) {
      std::printf(
          "ranks=%d stage 3  goal    peak %.2f MB vs the formula + 2 units = %.2f MB (%.3fx); "
          "+ activations %.2f MB (%.3fx)\n",
          comm.world_size(), peak / 1e6, goal3 / 1e6, peak / goal3, (goal3 + activations) / 1e6,
          peak / (goal3 + activations));
      // Prefetching overlaps each unit's gather with the previous unit's
      // compute, and the library keeps no statistics of it, so the hidden
      // share is estimated: what the gathers would cost one after another
      // (a unit's all-gather timed alone, once per unit per pass) against
      // the extra time stage 3 takes over a stage with the same compute and
      // no gathers: stage 0 in the forward pass; stage 2 in the backward
      // pass, which also reduce-scatters (in buckets of 25 MB, not per
      // unit). Everything else stage 3 does more counts as exposed gather.
      const double serial = shape.units * gather_ms;
      const auto hidden_share = [&](double extra) {
        return 100 * std::clamp(1 - extra / serial, 0.0, 1.0);
      };
      std::printf(
          "ranks=%d stage 3  gathers one unit's all-gather alone %.2f ms, %d per pass = %.2f ms",
          comm.world_size(), gather_ms, shape.units, serial);
      if (done.count(0)) {
        const double extra = m.forward_ms - done[0].forward_ms;
        std::printf("; forward %+.2f ms over stage 0: %.0f%% hidden", extra, hidden_share(extra));
      }
      if (done.count(2)) {
        const double extra = m.backward_ms - done[2].backward_ms;
        std::printf("; backward %+.2f ms over stage 2: %.0f%% hidden", extra, hidden_share(extra));
      }
      std::printf("\n");
    }
    std::fflush(stdout);
  }
}

}  // namespace zero_training_bench
