// dispatch_batches: process 0 reads the data and sends each global step to
// every process in one message; each process keeps its own part. Messages go
// out from the iterating thread only, so they stay in order with the
// training loop's other collectives on every process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace accelerate {
class Communicator;

namespace detail {

struct DispatchMessage {
  // No message follows: the epoch ends with this one.
  bool last = false;
  // Known in the last message (BatchDataLoader::remainder), else -1.
  int64_t remainder = -1;
  // Index in the epoch of the first batch carried (after a skip, > 0).
  uint64_t first_batch = 0;
  // Set when process 0 failed to produce the step; parts are empty then.
  std::string error;
  // parts[process]: that process's batches, each a serialized example list.
  // Usually one batch each; the last message may carry a second (the epoch's
  // short final step), so that processes which get nothing from that step
  // are not needed for another exchange.
  std::vector<std::vector<std::string>> parts;
};

std::string encode(const DispatchMessage& message);
DispatchMessage decode(const std::string& bytes);

// Process 0 passes its message's bytes; every process returns them.
std::string exchange_from_process_zero(Communicator& comm, const std::string* bytes);

}  // namespace detail
}  // namespace accelerate
