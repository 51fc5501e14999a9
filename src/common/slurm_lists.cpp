#include "common/slurm_lists.h"

#include <cctype>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "accelerate/common/job_state.h"
#include "common/environment_text.h"

namespace accelerate {
namespace detail {
namespace {

// "07-09,12" (the inside of brackets): checks every range, returns "07".
// The lower bound is kept as written because Slurm pads host numbers to it.
std::string first_in_ranges(std::string_view ranges, const std::string& subject) {
  if (ranges.empty()) fail(subject + " is malformed: empty '[]'");
  std::string first;
  for (std::string_view item : split(ranges, ',')) {
    const size_t dash = item.find('-');
    const std::string_view low = item.substr(0, dash);
    const std::string_view high = dash == std::string_view::npos ? low : item.substr(dash + 1);
    const auto low_value = parse_digits(low), high_value = parse_digits(high);
    if (!low_value || !high_value || *low_value > *high_value) {
      fail(subject + " is malformed: bad range '" + printable(item) + "'");
    }
    if (first.empty()) first = std::string(low);
  }
  return first;
}

}  // namespace

std::string first_host_checked(const std::string& nodelist, const std::string& subject) {
  if (nodelist.empty()) fail(subject + " is empty");
  std::vector<std::string> hosts(1);  // first host of each comma-separated entry
  bool in_brackets = false;
  size_t open = 0;
  for (size_t i = 0; i < nodelist.size(); ++i) {
    const char c = nodelist[i];
    if (c == '[') {
      if (in_brackets) fail(subject + " is malformed: nested '['");
      in_brackets = true;
      open = i;
    } else if (c == ']') {
      if (!in_brackets) fail(subject + " is malformed: ']' without '['");
      in_brackets = false;
      hosts.back() +=
          first_in_ranges(std::string_view(nodelist).substr(open + 1, i - open - 1), subject);
    } else if (in_brackets) {
      continue;  // checked as a whole at ']'
    } else if (c == ',') {
      if (hosts.back().empty()) fail(subject + " is malformed: empty host name");
      hosts.emplace_back();
    } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_') {
      hosts.back() += c;
    } else {
      fail(subject + " is malformed: unexpected character '" + printable(std::string(1, c)) + "'");
    }
  }
  if (in_brackets) fail(subject + " is malformed: '[' is never closed");
  if (hosts.back().empty()) fail(subject + " is malformed: empty host name");
  return hosts.front();
}

int tasks_on_node_checked(const std::string& tasks_per_node, int node_id,
                          const std::string& subject) {
  if (tasks_per_node.empty()) fail(subject + " is empty");
  if (node_id < 0)
    fail("node " + std::to_string(node_id) + " is negative; " + subject + " counts from 0");
  long long first_node = 0;  // of the current run of nodes
  std::optional<int> found;
  for (std::string_view item : split(tasks_per_node, ',')) {
    // "2" or "2(x3)": 2 tasks on each of 3 nodes.
    const size_t paren = item.find("(x");
    const auto tasks = parse_digits(item.substr(0, paren));
    std::optional<int> repeat = 1;
    if (paren != std::string_view::npos) {
      const std::string_view count = item.substr(paren + 2, item.size() - paren - 3);
      repeat = item.back() == ')' ? parse_digits(count) : std::nullopt;
    }
    if (!tasks || !repeat || *tasks < 1 || *repeat < 1) {
      fail(subject + " is malformed at '" + printable(item) + "' (expected counts like 2(x3),1)");
    }
    if (!found && node_id < first_node + *repeat) found = *tasks;
    first_node += *repeat;
  }
  if (!found) {
    fail(subject + " describes " + std::to_string(first_node) +
         " node(s), so it has no entry for node " + std::to_string(node_id));
  }
  return *found;
}

}  // namespace detail

std::optional<int> slurm_master_port(const Environment& env) {
  for (const char* name : {"SLURM_JOB_ID", "SLURM_JOBID"}) {
    auto job_id = lookup(env, name);
    if (!job_id) continue;
    const std::string& text = *job_id;
    if (text.empty() || text.size() > 18 ||
        text.find_first_not_of("0123456789") != std::string::npos) {
      detail::fail(std::string(name) + "='" + detail::printable(text) + "' is not a whole number");
    }
    return 20000 + static_cast<int>(std::stoll(text) % 10000);
  }
  return std::nullopt;
}

std::string first_host_in_slurm_nodelist(const std::string& nodelist) {
  return detail::first_host_checked(nodelist,
                                    "Slurm node list '" + detail::printable(nodelist) + "'");
}

int slurm_tasks_on_node(const std::string& tasks_per_node, int node_id) {
  const std::string subject = "Slurm tasks per node '" + detail::printable(tasks_per_node) + "'";
  return detail::tasks_on_node_checked(tasks_per_node, node_id, subject);
}

}  // namespace accelerate
