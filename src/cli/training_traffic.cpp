#include "cli/training_traffic.h"

#include <cmath>
#include <cstdio>

#include "cli/memory_estimate.h"

namespace accelerate::cli {
namespace {

constexpr double kFloatBytes = 4;
// ZeRO++'s quantizers: one fp32 scale per block of 4096 elements.
constexpr double kScaleBytesPerElement = 4.0 / 4096;

// A flat collective (reduce-scatter, all-gather, all-to-all) of `bytes`
// over a group of `n` processes sends bytes/n to each other member.
struct Group {
  double n = 1;
  double off_node_members = 0;  // members on other machines than this process
};

void add_flat(StepTraffic& out, const Group& group, double bytes) {
  if (group.n <= 1) return;
  out.sent += (group.n - 1) / group.n * bytes;
  out.sent_off_node += group.off_node_members / group.n * bytes;
}

// A ring all-reduce sends 2 (n-1)/n of the buffer to the next member; with
// consecutive ranks per machine, `crossing` of the n members have their
// successor on another machine (averaged over the members).
void add_ring_all_reduce(StepTraffic& out, double n, double crossing, double bytes) {
  if (n <= 1) return;
  const double sent = 2 * (n - 1) / n * bytes;
  out.sent += sent;
  out.sent_off_node += sent * crossing / n;
}

}  // namespace

std::vector<WireFormat> wire_formats_for(const TrainingSetup& setup) {
  std::vector<WireFormat> formats = {{"fp32 collectives", "default", 4, 4, false}};
  const int stage = setup.effective_stage();
  if (stage >= 2) {
    formats.push_back(
        {"bf16 gradient reduce-scatters", "communication_data_type: bf16", 4, 2, false});
    formats.push_back({"bf16 gathers and reduce-scatters",
                       "FSDP mixed_precision_policy param_dtype=reduce_dtype=bf16", 2, 2, false});
  }
  if (stage == 3) {
    formats.push_back({"qwZ + qgZ (int8 gathers, int4 reduce-scatters)",
                       "zero_quantized_weights + zero_quantized_gradients",
                       1 + kScaleBytesPerElement, 0.5 + kScaleBytesPerElement, false, true});
    if (setup.num_nodes > 1 && !setup.hybrid && setup.processes_per_node() > 1) {
      formats.push_back({"hpZ over a machine's processes",
                         "zero_hpz_partition_size: " + std::to_string(setup.processes_per_node()),
                         4, 4, true});
    }
  }
  return formats;
}

StepTraffic step_traffic(double parameters, double outside_units, const TrainingSetup& setup,
                         const WireFormat& wire) {
  StepTraffic out;
  const double processes = setup.num_processes;
  const double per_node = setup.processes_per_node();
  const double nodes = setup.num_nodes;
  const int stage = setup.effective_stage();
  if (stage == 0) {
    add_ring_all_reduce(out, processes, nodes > 1 ? nodes : 0, kFloatBytes * parameters);
    return out;
  }
  // The shard group: the job, or (hybrid) this machine's processes.
  const Group shard = setup.hybrid ? Group{per_node, 0} : Group{processes, processes - per_node};
  const double units = stage == 3 ? parameters - outside_units : 0;
  const double rest = parameters - units;
  const double gather = wire.gather_element_bytes, reduce = wire.reduce_element_bytes;
  if (stage == 1) {
    // Whole gradient buckets all-reduced over the shard group.
    add_ring_all_reduce(out, shard.n, setup.hybrid ? 0 : nodes, kFloatBytes * parameters);
  } else if (wire.two_level_reduce && !setup.hybrid && nodes > 1 && per_node > 1) {
    add_flat(out, Group{per_node, 0}, reduce * parameters);
    add_flat(out, Group{nodes, nodes - 1}, reduce * parameters / per_node);
  } else {
    add_flat(out, shard, reduce * parameters);
  }
  add_flat(out, shard, gather * rest);  // the parameters' gather after the step
  if (units > 0) {
    add_flat(out, shard, gather * units);  // forward
    // backward: again over the shard group, or inside the machine (hpZ)
    add_flat(out, wire.hpz_within_node ? Group{per_node, 0} : shard, gather * units);
  }
  if (setup.hybrid && nodes > 1) {
    // Each gradient shard summed across the machines' replicas, in fp32.
    const double shard_bytes = kFloatBytes * parameters / per_node;
    out.sent += 2 * (nodes - 1) / nodes * shard_bytes;
    out.sent_off_node += 2 * (nodes - 1) / nodes * shard_bytes;
  }
  return out;
}

std::string render_step_traffic(double parameters, double outside_units,
                                const TrainingSetup& setup) {
  const bool nodes = setup.num_nodes > 1;
  std::vector<std::vector<std::string>> cells;
  if (nodes) {
    cells.push_back({"collectives (setting)", "sent", "to other machines", "vs fp32"});
  } else {
    cells.push_back({"collectives (setting)", "sent", "vs fp32"});
  }
  const std::vector<WireFormat> formats = wire_formats_for(setup);
  const StepTraffic base = step_traffic(parameters, outside_units, setup, formats.front());
  for (const WireFormat& wire : formats) {
    const StepTraffic traffic = step_traffic(parameters, outside_units, setup, wire);
    // Compare what crosses machines when there are several: that is the
    // scarce link.
    const double reference = nodes ? base.sent_off_node : base.sent;
    const double value = nodes ? traffic.sent_off_node : traffic.sent;
    char ratio[32] = "-";
    if (reference > 0) std::snprintf(ratio, sizeof ratio, "%.3fx", value / reference);
    std::vector<std::string> row = {wire.name + " (" + wire.source + ")",
                                    format_bytes(std::round(traffic.sent), true)};
    if (nodes) row.push_back(format_bytes(std::round(traffic.sent_off_node), true));
    row.push_back(ratio);
    cells.push_back(row);
  }
  std::string out =
      "Bytes each process sends per optimizer step (one micro-batch; bucket padding left out):\n";
  out += render_box_table(cells);
  return out;
}

}  // namespace accelerate::cli
