// The communication half of `accelerate estimate-memory`'s training
// section: the bytes one process sends per optimizer step under each way
// the collectives can travel (fp32, bf16, ZeRO++'s quantized wires and
// hpZ), in total and to processes on other machines. The terms are those
// Communicator::traffic() counts (docs/distributed.md, "Traffic counters"),
// so a run's counters can be checked against them. Torch-free.
#pragma once

#include <string>
#include <vector>

#include "cli/training_estimate.h"

namespace accelerate::cli {

// How the sharded collectives travel: the bytes of one element on the wire
// for the parameter all-gathers and for the gradient reduce-scatters, and
// whether hpZ keeps stage 3's backward gathers inside a machine.
struct WireFormat {
  std::string name;    // "fp32 collectives", ...
  std::string source;  // the setting that selects it
  double gather_element_bytes = 4;
  double reduce_element_bytes = 4;
  bool hpz_within_node = false;
  // qgZ: across machines the reduce-scatters run in two levels, inside
  // each machine, then 1/G of the bytes between machines.
  bool two_level_reduce = false;
};

// The formats worth comparing for `setup`: fp32 always; at stages 2-3 bf16
// reduce-scatters and bf16 gathers too; at stage 3 qwZ + qgZ, and hpZ over
// a machine's processes when the job spans machines without hybrid
// sharding. Quantized formats count one fp32 scale per block of 4096.
std::vector<WireFormat> wire_formats_for(const TrainingSetup& setup);

struct StepTraffic {
  double sent = 0;           // bytes this process sends per optimizer step
  double sent_off_node = 0;  // of which to processes on other machines
};

// Per process and optimizer step (one micro-batch, no accumulation), for
// Ψ = `parameters` of which `outside_units` no stage-3 unit holds, with
// N processes, G per machine, R machines, S = the shard group's processes,
// E_g / E_r the gather / reduce element bytes:
//   stage 0: all-reduce (ring) 2 (N-1)/N x 4Ψ
//   stage 1: gradient all-reduce 2 (S-1)/S x 4Ψ + parameter gather (S-1)/S x E_g Ψ
//   stage 2: reduce-scatter (S-1)/S x E_r Ψ + gather (S-1)/S x E_g Ψ
//   stage 3: units gather twice (forward, backward) and reduce-scatter
//            once; the rest as stage 2
//   hybrid:  the shard group is a machine, plus an fp32 all-reduce of each
//            gradient shard across the R machines, 2 (R-1)/R x 4Ψ/G
//   hpZ:     the backward gather inside the machine, (G-1)/G x E_g Ψu
//   qgZ on several machines (not hybrid): each reduce-scatter in two levels,
//            (G-1)/G x E_r Ψ inside the machine + (R-1)/R x E_r Ψ/G across
// Bucket padding is left out.
StepTraffic step_traffic(double parameters, double outside_units, const TrainingSetup& setup,
                         const WireFormat& wire);

// The table estimate-memory prints: one row per wire_formats_for(setup).
std::string render_step_traffic(double parameters, double outside_units,
                                const TrainingSetup& setup);

}  // namespace accelerate::cli
