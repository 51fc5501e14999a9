// TensorBoardTracker in a build without libprotobuf: the class exists (so
// code that names it links everywhere) but cannot start.
#include "accelerate/common/errors.h"
#include "accelerate/tracking/tensorboard.h"

namespace accelerate {

class EventFileWriter {};

namespace {
[[noreturn]] void unavailable() {
  throw ConfigError(
      "log_with \"tensorboard\" is not available: accelerate-cpp was built without "
      "libprotobuf (install libprotobuf-dev and protobuf-compiler, then reconfigure)");
}
}  // namespace

bool tensorboard_available() { return false; }

TensorBoardTracker::TensorBoardTracker() = default;
TensorBoardTracker::~TensorBoardTracker() = default;
void TensorBoardTracker::start(const TrackerRun&) { unavailable(); }
void TensorBoardTracker::store_init_configuration(const TrackerConfig&) { unavailable(); }
void TensorBoardTracker::log(const TrackerValues&, std::int64_t) { unavailable(); }
void TensorBoardTracker::add_text(const std::string&, const std::string&, std::int64_t) {
  unavailable();
}
void TensorBoardTracker::flush() {}
void TensorBoardTracker::finish() {}
std::string TensorBoardTracker::event_file() const { return ""; }

}  // namespace accelerate
