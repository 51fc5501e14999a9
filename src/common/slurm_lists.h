// Slurm's compressed lists: node lists ("gpu[07-09,12],cpu1") and tasks per
// node ("2(x3),1"), checked strictly so a malformed one is a clear error,
// not a rendezvous that hangs. Internal; the public entry points are in
// job_state.h.
#pragma once

#include <string>

namespace accelerate {
namespace detail {

// The first host of `nodelist`; `subject` names it in errors.
std::string first_host_checked(const std::string& nodelist, const std::string& subject);
// Tasks on node `node_id` (from 0).
int tasks_on_node_checked(const std::string& tasks_per_node, int node_id,
                          const std::string& subject);

}  // namespace detail
}  // namespace accelerate
