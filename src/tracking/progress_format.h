// The text of one progress-bar line, as a pure function (tested exactly).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "accelerate/tracking/progress_bar.h"

namespace accelerate {
namespace tracking {

struct ProgressSnapshot {
  std::string desc;
  std::string unit = "it";
  std::int64_t n = 0;
  std::optional<std::int64_t> total;
  double elapsed_secs = 0;
  ProgressPostfix postfix;
  int width = 80;
};

// "desc:  45%|####      | 450/1000 [00:12<00:15, 36.21it/s, loss=0.1234]";
// without a total: "desc: 450it [00:12, 36.21it/s, loss=0.1234]".
std::string format_progress(const ProgressSnapshot& snapshot);
// "05:07" below an hour, "1:02:03" from one hour on.
std::string format_duration(double secs);
// A postfix value: integers and strings as they are, floating-point numbers
// with 4 significant digits ("0.1235", "1.5e-05").
std::string format_postfix_value(const TrackerValue& value);

}  // namespace tracking
}  // namespace accelerate
