// Logs to every built-in tracker, then waits to be killed (crash_test.cpp).
// Usage: tracking_log_child LOGGING_DIR flush|write_through STEPS
//   flush:         flush_secs 600; logs STEPS values, flush(), logs STEPS
//                  more (left in memory), prints "ready", waits.
//   write_through: flush_secs 0; logs 2*STEPS values, prints "ready", waits.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <unistd.h>

#include "accelerate/tracking/tracking.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s LOGGING_DIR flush|write_through STEPS\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[2];
  const int steps = std::atoi(argv[3]);
  accelerate::Trackers trackers(
      accelerate::TrackingOptions().log_with({"all"}).logging_dir(argv[1]).flush_secs(
          mode == "flush" ? 600 : 0));
  trackers.init_trackers("crash", {{"lr", 0.5}});
  for (int step = 0; step < 2 * steps; ++step) {
    if (mode == "flush" && step == steps) trackers.flush();
    trackers.log({{"loss", step * 0.5}}, step);
  }
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) ::pause();  // killed with SIGKILL: no destructor, no final flush
}
