// Text encodings shared by the JSONL and CSV trackers and the progress bar.
#pragma once

#include <map>
#include <string>

#include "accelerate/tracking/tracker_value.h"

namespace accelerate {
namespace tracking {

// The shortest "%g" form that reads back to exactly `value` ("0.1", "1e-05").
std::string shortest_double(double value);
// A JSON string literal, with quotes.
std::string json_string(const std::string& text);
// A JSON value: numbers exactly, NaN and infinities as null, strings escaped.
std::string json_value(const TrackerValue& value);
// A JSON object of `values`, keys in map order.
std::string json_object(const std::map<std::string, TrackerValue>& values);
// One RFC 4180 field: quoted (with doubled quotes) only when needed.
std::string csv_field(const std::string& text);
// Seconds since the Unix epoch, with sub-second precision (the wall_time of
// TensorBoard events and of JSONL/CSV rows).
double wall_time_now();
// Seconds with microseconds: "1700000000.123456".
std::string fixed_seconds(double seconds);

}  // namespace tracking
}  // namespace accelerate
