#include "reference_python.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>

#include "accelerate/checkpoint/safetensors.h"

namespace accelerate::testing {

namespace fs = std::filesystem;

std::string reference_interpreter() {
  const char* python = std::getenv("ACCELERATE_REFERENCE_PYTHON");
  return python && *python && fs::exists(python) ? python : "";
}

RunResult run_reference_script(const std::string& script, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {reference_interpreter(), script};
  argv.insert(argv.end(), args.begin(), args.end());
  // One thread: PyTorch's CPU products then sum in one order whatever the
  // machine's load (MKL's dynamic threading may otherwise pick fewer threads
  // on a busy machine, and another rounding); the reference models are tiny.
  return run_program(argv,
                     {{"HF_HUB_OFFLINE", "1"},
                      {"TQDM_DISABLE", "1"},
                      {"CUDA_VISIBLE_DEVICES", ""},
                      {"OMP_NUM_THREADS", "1"},
                      {"MKL_NUM_THREADS", "1"}},
                     std::chrono::minutes(3));
}

namespace {

std::string make_reference_folder(const std::string& script) {
  // Remade when the script, the interpreter or the pinned versions change.
  // (and the helpers the scripts import, tests/models/reference_models.py).
  std::ifstream source(script), pins(REFERENCE_REQUIREMENTS),
      helpers((fs::path(script).parent_path() / "reference_models.py").string());
  std::ostringstream text;
  text << source.rdbuf() << pins.rdbuf() << helpers.rdbuf() << reference_interpreter();
  const char* bin = std::getenv("ACCELERATE_TEST_BIN_DIR");
  const fs::path root = fs::path(bin ? bin : fs::temp_directory_path().string()) /
                        "models-reference" / fs::path(script).stem();
  const fs::path ready = root / std::to_string(std::hash<std::string>{}(text.str()));
  fs::create_directories(root);
  const int lock = ::open((root / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) {
    ADD_FAILURE() << "cannot lock " << root / ".lock";
    if (lock >= 0) ::close(lock);
    return std::string();
  }
  std::string made = ready.string();
  if (!fs::exists(ready / "versions.json")) {
    const fs::path scratch = root / ("making-" + std::to_string(::getpid()));
    fs::remove_all(scratch);
    const auto result = run_reference_script(script, {"make", scratch.string()});
    if (result.exit_code != 0) {
      ADD_FAILURE() << fs::path(script).filename() << " make failed (" << result.exit_code
                    << "): " << result.err;
      made.clear();
    } else {
      fs::remove_all(ready);
      fs::rename(scratch, ready);
    }
  }
  ::close(lock);  // releases the lock
  return made;
}

}  // namespace

const std::string& reference_folder(const std::string& script) {
  static std::mutex mutex;
  static std::map<std::string, std::string> folders;
  std::lock_guard<std::mutex> guard(mutex);
  auto found = folders.find(script);
  if (found == folders.end()) found = folders.emplace(script, make_reference_folder(script)).first;
  return found->second;
}

std::map<std::string, at::Tensor> load_named_tensors(const std::string& path) {
  std::map<std::string, at::Tensor> out;
  for (auto& [name, tensor] : load_safetensors(path)) out[name] = tensor;
  return out;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

}  // namespace accelerate::testing
