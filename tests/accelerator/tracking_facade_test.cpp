// The Accelerator's tracking methods: log_with + project_dir reach the
// trackers, only the main process writes, get_logger knows the ranks.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/common/errors.h"
#include "support/thread_ranks.h"

namespace {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
namespace fs = std::filesystem;

std::string read_all(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

TEST(AcceleratorTracking, LogsIntoTheProjectDirectoryFromTheMainProcessOnly) {
  const fs::path project = fresh_dir("accelerate-tracking-facade");
  accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    Accelerator accelerator(comm,
                            AcceleratorOptions().log_with({"jsonl"}).project_dir(project.string()));
    accelerator.init_trackers("run", {{"lr", 0.5}});
    accelerator.log({{"loss", 1.25}, {"rank", static_cast<int64_t>(comm->rank())}}, 3);
    accelerator.end_training();
  });
  const std::string text = read_all(project / "run" / "metrics.jsonl");
  EXPECT_NE(text.find("\"lr\":0.5"), std::string::npos) << text;
  EXPECT_NE(text.find("\"step\":3"), std::string::npos) << text;
  EXPECT_NE(text.find("\"rank\":0"), std::string::npos) << text;
  EXPECT_EQ(text.find("\"rank\":1"), std::string::npos) << "rank 1 wrote: " << text;
  fs::remove_all(project);
}

TEST(AcceleratorTracking, UnknownTrackerIsAConfigError) {
  accelerate::testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    EXPECT_THROW(Accelerator(comm, AcceleratorOptions().log_with({"wandb"}).project_dir("/tmp")),
                 accelerate::ConfigError);
  });
}

TEST(AcceleratorTracking, NoTrackersByDefault) {
  accelerate::testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    Accelerator accelerator(comm);
    EXPECT_NO_THROW(accelerator.init_trackers("nothing"));
    EXPECT_NO_THROW(accelerator.log({{"x", 1.0}}));
    EXPECT_NO_THROW(accelerator.end_training());
  });
}

}  // namespace
