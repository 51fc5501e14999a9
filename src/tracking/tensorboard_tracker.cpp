// TensorBoardTracker with libprotobuf (tensorboard_unavailable.cpp otherwise).
#include <exception>
#include <filesystem>
#include <system_error>

#include "accelerate/common/errors.h"
#include "accelerate/tracking/tensorboard.h"
#include "tracking/event_file_writer.h"
#include "tracking/text_format.h"

namespace accelerate {
namespace {

// Tags and plugin names TensorBoard's plugins look for.
constexpr const char* kSessionStartTag = "_hparams_/session_start_info";
constexpr const char* kSessionEndTag = "_hparams_/session_end_info";

// The hparams plugin's values carry their data in the metadata; the tensor
// is an empty placeholder TensorBoard expects for the tensor data class.
void set_null_tensor(tb::TensorProto* tensor) {
  tensor->set_dtype(tb::DT_FLOAT);
  tensor->mutable_tensor_shape();
  tensor->add_float_val(0.0f);
}

tb::Event hparams_event(const char* tag, const tb::HParamsPluginData& data) {
  tb::Event event;
  event.set_wall_time(tracking::wall_time_now());
  event.set_step(0);
  auto* value = event.mutable_summary()->add_value();
  value->set_tag(tag);
  auto* metadata = value->mutable_metadata();
  metadata->mutable_plugin_data()->set_plugin_name("hparams");
  metadata->mutable_plugin_data()->set_content(data.SerializeAsString());
  metadata->set_data_class(tb::DATA_CLASS_TENSOR);
  set_null_tensor(value->mutable_tensor());
  return event;
}

void add_text_value(tb::Summary* summary, const std::string& tag, const std::string& text) {
  auto* value = summary->add_value();
  value->set_tag(tag);
  auto* metadata = value->mutable_metadata();
  metadata->mutable_plugin_data()->set_plugin_name("text");
  metadata->set_data_class(tb::DATA_CLASS_TENSOR);
  auto* tensor = value->mutable_tensor();
  tensor->set_dtype(tb::DT_STRING);
  tensor->mutable_tensor_shape();  // rank 0: one string
  tensor->add_string_val(text);
}

}  // namespace

bool tensorboard_available() { return true; }

TensorBoardTracker::TensorBoardTracker() = default;
TensorBoardTracker::~TensorBoardTracker() = default;

void TensorBoardTracker::start(const TrackerRun& run) {
  if (run.run_dir.empty()) {
    throw ConfigError(
        "log_with \"tensorboard\" needs a logging_dir (set project_dir or logging_dir)");
  }
  std::error_code error;
  std::filesystem::create_directories(run.run_dir, error);
  if (error)
    throw Error("cannot create the TensorBoard directory " + run.run_dir + ": " + error.message());
  writer_ = std::make_unique<EventFileWriter>(run.run_dir, run.flush_secs);
}

void TensorBoardTracker::store_init_configuration(const TrackerConfig& config) {
  if (!writer_) throw Error("TensorBoardTracker: store_init_configuration() before start()");
  tb::HParamsPluginData data;
  data.set_version(0);
  auto* start = data.mutable_session_start_info();
  start->set_start_time_secs(tracking::wall_time_now());
  for (const auto& [name, item] : config) {
    tb::Value& value = (*start->mutable_hparams())[name];
    if (item.is_string()) {
      value.set_string_value(item.string());
    } else if (item.is_bool()) {
      value.set_bool_value(std::get<bool>(item.storage()));
    } else {
      value.set_number_value(item.to_double());
    }
  }
  writer_->write(hparams_event(kSessionStartTag, data));
  wrote_session_start_ = true;
}

void TensorBoardTracker::log(const TrackerValues& values, std::int64_t step) {
  if (!writer_) throw Error("TensorBoardTracker: log() before start()");
  tb::Event event;
  event.set_wall_time(tracking::wall_time_now());
  event.set_step(step);
  auto* summary = event.mutable_summary();
  for (const auto& [tag, item] : values) {
    if (item.is_string()) {
      add_text_value(summary, tag, item.string());
    } else {
      auto* value = summary->add_value();
      value->set_tag(tag);
      value->set_simple_value(static_cast<float>(item.to_double()));
    }
  }
  writer_->write(event);
}

void TensorBoardTracker::add_text(const std::string& tag, const std::string& text,
                                  std::int64_t step) {
  if (!writer_) throw Error("TensorBoardTracker: add_text() before start()");
  tb::Event event;
  event.set_wall_time(tracking::wall_time_now());
  event.set_step(step);
  add_text_value(event.mutable_summary(), tag, text);
  writer_->write(event);
}

void TensorBoardTracker::flush() {
  if (writer_) writer_->flush();
}

void TensorBoardTracker::finish() {
  if (!writer_) return;
  if (wrote_session_start_) {
    tb::HParamsPluginData data;
    data.set_version(0);
    // Finishing while an exception unwinds the stack (Trackers' destructor
    // in a failed run) records the session as failed.
    data.mutable_session_end_info()->set_status(
        std::uncaught_exceptions() > 0 ? tb::STATUS_FAILURE : tb::STATUS_SUCCESS);
    data.mutable_session_end_info()->set_end_time_secs(tracking::wall_time_now());
    writer_->write(hparams_event(kSessionEndTag, data));
    wrote_session_start_ = false;
  }
  writer_->close();
}

std::string TensorBoardTracker::event_file() const { return writer_ ? writer_->path() : ""; }

}  // namespace accelerate
