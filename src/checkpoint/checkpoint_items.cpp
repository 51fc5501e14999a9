#include "checkpoint/checkpoint_items.h"

#include <exception>
#include <filesystem>

#include <torch/serialize/archive.h>

#include "accelerate/common/errors.h"
#include "checkpoint/checkpoint_archives.h"

namespace accelerate::checkpoint {
namespace {

class ArchiveItem : public CheckpointItem {
 public:
  ArchiveItem(std::string path, std::function<void(torch::serialize::OutputArchive&)> save,
              std::function<void(torch::serialize::InputArchive&)> load)
      : path_(std::move(path)), save_(std::move(save)), load_(std::move(load)) {}

  void write(const ItemContext& context) override {
    if (!context.main_process()) return;
    save_archive(path_, save_);
    context.written(path_);
  }
  void check(const ItemContext& context) override {
    (void)context;
    if (!std::filesystem::is_regular_file(path_))
      throw Error("checkpoint file " + path_ + " is missing");
  }
  void apply(const ItemContext& context) override {
    (void)context;
    load_archive(path_, load_);
  }

 private:
  std::string path_;
  std::function<void(torch::serialize::OutputArchive&)> save_;
  std::function<void(torch::serialize::InputArchive&)> load_;
};

}  // namespace

void ItemContext::written(const std::string& path) const {
  if (sync_to_disk) start_writeback(path);
}

std::unique_ptr<CheckpointItem> archive_item(
    std::string path, std::function<void(torch::serialize::OutputArchive&)> save,
    std::function<void(torch::serialize::InputArchive&)> load) {
  return std::make_unique<ArchiveItem>(std::move(path), std::move(save), std::move(load));
}

std::string write_items(const CheckpointItems& items, const ItemContext& context) {
  std::string first_error;
  for (const auto& item : items) {
    try {
      item->write(context);
    } catch (const std::exception& e) {
      if (first_error.empty()) first_error = e.what();
    }
  }
  return first_error;
}

void check_items(const CheckpointItems& items, const ItemContext& context) {
  for (const auto& item : items) item->check(context);
}

void apply_items(const CheckpointItems& items, const ItemContext& context) {
  for (const auto& item : items) item->apply(context);
}

void require_count(const std::string& folder, const char* what, std::int64_t saved,
                   std::size_t prepared) {
  if (saved == static_cast<std::int64_t>(prepared)) return;
  throw Error("checkpoint " + folder + " holds " + std::to_string(saved) + " " + what +
              " but this Accelerator has " + std::to_string(prepared) +
              " (prepare and register the same objects, in the same order, as the run that "
              "saved it)");
}

}  // namespace accelerate::checkpoint
