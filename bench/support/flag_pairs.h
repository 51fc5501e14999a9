// The command lines of the benches: "--flag value" pairs, and comma lists
// ("--ranks 2,4"). Errors are std::invalid_argument, which each bench's
// main prints as its one-line error.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace bench {

// argv[1..] as (flag, value) pairs, in order.
inline std::vector<std::pair<std::string, std::string>> flag_pairs(int argc, char** argv) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
    pairs.emplace_back(flag, argv[i + 1]);
  }
  return pairs;
}

// "1,8,64" -> {"1", "8", "64"}.
inline std::vector<std::string> comma_items(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) items.push_back(item);
  return items;
}

}  // namespace bench
