#include "tracking/event_file_writer.h"

#include <limits.h>
#include <unistd.h>

#include "accelerate/common/errors.h"
#include "tracking/text_format.h"
#include "tracking/tfrecord.h"

namespace accelerate {
namespace {

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

EventFileWriter::EventFileWriter(const std::string& directory, double flush_secs) {
  const double now = tracking::wall_time_now();
  const std::string base = directory + "/events.out.tfevents." +
                           std::to_string(static_cast<long long>(now)) + "." + host_name() + "." +
                           std::to_string(::getpid());
  file_ = tracking::BufferedFile::create_unique(base, flush_secs);
  tb::Event first;
  first.set_wall_time(now);
  first.set_step(0);
  first.set_file_version("brain.Event:2");
  write(first);
}

void EventFileWriter::write(const tb::Event& event) {
  std::string payload;
  if (!event.SerializeToString(&payload)) throw Error("cannot serialize a TensorBoard event");
  file_->append(tracking::tfrecord_frame(payload));
}

}  // namespace accelerate
