// EventFileWriter: one TensorBoard event file (needs libprotobuf; compiled
// only when CMake found it).
#pragma once

#include <memory>
#include <string>

#include "tensorboard_events.pb.h"
#include "tracking/buffered_file.h"

namespace accelerate {

namespace tb = accelerate::tensorboard_wire;

class EventFileWriter {
 public:
  // Creates directory/events.out.tfevents.<unix seconds>.<host>.<pid> (the
  // name TensorBoard's own writers use, so its file discovery finds it) and
  // queues the file_version event.
  EventFileWriter(const std::string& directory, double flush_secs);

  // Queues one framed Event; see BufferedFile for when it reaches the disk.
  void write(const tb::Event& event);
  void flush() { file_->flush(); }
  void close() { file_->close(); }
  const std::string& path() const { return file_->path(); }

 private:
  std::unique_ptr<tracking::BufferedFile> file_;
};

}  // namespace accelerate
