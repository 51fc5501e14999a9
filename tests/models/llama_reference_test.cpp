// The Llama model against transformers (tests/models/llama_reference.py run
// under $ACCELERATE_REFERENCE_PYTHON, scripts/install-reference-python.sh):
// transformers' tiny random models load here and give transformers' logits,
// loss and gradients; what we save loads in transformers and gives ours.
// Without the interpreter every test here reports itself skipped.
#include <ATen/ATen.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "accelerate/models/llama.h"
#include "accelerate/safetensors.h"
#include "support/process_runner.h"
#include "support/temp_dir.h"

namespace am = accelerate::models;
namespace fs = std::filesystem;
using accelerate::testing::run_program;
using accelerate::testing::TempDir;

namespace {

std::string reference_interpreter() {
  const char* python = std::getenv("ACCELERATE_REFERENCE_PYTHON");
  return python && *python && fs::exists(python) ? python : "";
}

#define REQUIRE_REFERENCE_PYTHON()                                                           \
  if (reference_interpreter().empty())                                                       \
  GTEST_SKIP() << "no Python reference: set ACCELERATE_REFERENCE_PYTHON to the interpreter " \
                  "scripts/install-reference-python.sh prints (scripts/test.sh does)"

accelerate::testing::RunResult run_reference(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {reference_interpreter(), LLAMA_REFERENCE_SCRIPT};
  argv.insert(argv.end(), args.begin(), args.end());
  // Offline and quiet: nothing may come from a model hub.
  return run_program(argv,
                     {{"HF_HUB_OFFLINE", "1"}, {"TQDM_DISABLE", "1"}, {"CUDA_VISIBLE_DEVICES", ""}},
                     std::chrono::minutes(3));
}

// The reference models and outputs, made once per script version and shared
// by the test processes (each CTest test is a process of its own): the first
// makes them under a lock while the others wait, in a private folder renamed
// into place, so no process ever reads half of them.
const std::string& reference_folder() {
  static const std::string folder = [] {
    // Remade when the script, the interpreter or the pinned versions change.
    std::ifstream script(LLAMA_REFERENCE_SCRIPT), pins(REFERENCE_REQUIREMENTS);
    std::ostringstream text;
    text << script.rdbuf() << pins.rdbuf() << reference_interpreter();
    const char* bin = std::getenv("ACCELERATE_TEST_BIN_DIR");
    const fs::path root =
        fs::path(bin ? bin : fs::temp_directory_path().string()) / "models-reference";
    const fs::path ready = root / std::to_string(std::hash<std::string>{}(text.str()));
    fs::create_directories(root);
    const int lock = ::open((root / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock < 0 || ::flock(lock, LOCK_EX) != 0) {
      ADD_FAILURE() << "cannot lock " << root / ".lock";
      return std::string();
    }
    std::string made = ready.string();
    if (!fs::exists(ready / "versions.json")) {
      const fs::path scratch = root / ("making-" + std::to_string(::getpid()));
      fs::remove_all(scratch);
      const auto result = run_reference({"make", scratch.string()});
      if (result.exit_code != 0) {
        ADD_FAILURE() << "llama_reference.py make failed (" << result.exit_code
                      << "): " << result.err;
        made.clear();
      } else {
        fs::remove_all(ready);
        fs::rename(scratch, ready);
      }
    }
    ::close(lock);  // releases the lock
    return made;
  }();
  return folder;
}

std::map<std::string, at::Tensor> reference_outputs(const std::string& variant) {
  std::map<std::string, at::Tensor> out;
  for (auto& [name, tensor] : accelerate::load_safetensors(reference_folder() + "/" + variant +
                                                           "/reference.safetensors")) {
    out[name] = tensor;
  }
  return out;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// Logits within 1e-5 (fp32 rounding) of transformers'.
void expect_reference_logits(const std::string& variant) {
  ASSERT_FALSE(reference_folder().empty());
  auto reference = reference_outputs(variant);
  auto model =
      am::LlamaForCausalLMImpl::from_pretrained(reference_folder() + "/" + variant + "/model");
  model->eval();
  at::NoGradGuard no_grad;
  const at::Tensor logits = model->forward(reference.at("input_ids"));
  ASSERT_EQ(logits.sizes(), reference.at("logits").sizes());
  const double diff = max_abs_diff(logits, reference.at("logits"));
  EXPECT_LE(diff, 1e-5) << variant;
  // The logits are not near zero, so the bound means something.
  EXPECT_GT(reference.at("logits").abs().max().item<double>(), 0.5) << variant;
}

// Loss and every parameter's gradient within 1e-4 relative of transformers'.
void expect_reference_gradients(const std::string& variant) {
  ASSERT_FALSE(reference_folder().empty());
  auto reference = reference_outputs(variant);
  auto model =
      am::LlamaForCausalLMImpl::from_pretrained(reference_folder() + "/" + variant + "/model");
  model->train();
  const at::Tensor loss = model->loss(reference.at("input_ids"), reference.at("labels"));
  const double expected_loss = reference.at("loss").item<double>();
  EXPECT_LE(std::abs(loss.item<double>() - expected_loss), 1e-4 * std::abs(expected_loss))
      << variant;
  loss.backward();
  size_t compared = 0;
  for (const auto& item : model->named_parameters()) {
    const auto found = reference.find("grad." + item.key());
    ASSERT_NE(found, reference.end()) << "transformers has no gradient for " << item.key();
    const at::Tensor& grad = item.value().grad();
    ASSERT_TRUE(grad.defined()) << item.key();
    const double scale = found->second.abs().max().item<double>();
    EXPECT_GT(scale, 0) << item.key();
    EXPECT_LE(max_abs_diff(grad, found->second), 1e-4 * scale) << variant << " " << item.key();
    ++compared;
  }
  size_t reference_grads = 0;
  for (const auto& [name, tensor] : reference) reference_grads += name.rfind("grad.", 0) == 0;
  EXPECT_EQ(compared, reference_grads) << variant;
}

}  // namespace

TEST(LlamaReference, LogitsEqualTransformersPlain) {
  REQUIRE_REFERENCE_PYTHON();
  expect_reference_logits("plain");
}

TEST(LlamaReference, LogitsEqualTransformersLlama3RopeTied) {
  REQUIRE_REFERENCE_PYTHON();
  expect_reference_logits("llama3_tied");
}

TEST(LlamaReference, LogitsEqualTransformersShardedWithBiases) {
  REQUIRE_REFERENCE_PYTHON();
  expect_reference_logits("sharded");
}

TEST(LlamaReference, LossAndGradientsEqualTransformersPlain) {
  REQUIRE_REFERENCE_PYTHON();
  expect_reference_gradients("plain");
}

TEST(LlamaReference, LossAndGradientsEqualTransformersLlama3RopeTied) {
  REQUIRE_REFERENCE_PYTHON();
  expect_reference_gradients("llama3_tied");
}

TEST(LlamaReference, LossAndGradientsEqualTransformersShardedWithBiases) {
  REQUIRE_REFERENCE_PYTHON();
  expect_reference_gradients("sharded");
}

// Our saves (after changing the weights, so transformers must read ours)
// load with transformers' from_pretrained and give our logits: one file
// untied, one file tied with llama3 rope, and shards.
TEST(LlamaReference, TransformersLoadsWhatWeSave) {
  REQUIRE_REFERENCE_PYTHON();
  ASSERT_FALSE(reference_folder().empty());
  for (const auto& [variant, shard] : std::vector<std::pair<std::string, std::string>>{
           {"plain", "5GB"}, {"llama3_tied", "5GB"}, {"sharded", "30KB"}}) {
    auto model =
        am::LlamaForCausalLMImpl::from_pretrained(reference_folder() + "/" + variant + "/model");
    torch::manual_seed(7);
    {
      at::NoGradGuard no_grad;
      for (auto& p : model->parameters()) p.add_(at::randn_like(p) * 0.05);
    }
    TempDir dir;
    const auto files = model->save_pretrained(dir.file("model"), shard);
    EXPECT_EQ(files.size() > 1, shard == "30KB") << variant;
    const at::Tensor ids = reference_outputs(variant).at("input_ids");
    accelerate::save_safetensors(dir.file("ids.safetensors"), {{"input_ids", ids}});
    const auto result = run_reference(
        {"logits", dir.file("model"), dir.file("ids.safetensors"), dir.file("out.safetensors")});
    ASSERT_EQ(result.exit_code, 0) << variant << ": " << result.err;
    const at::Tensor theirs =
        accelerate::load_safetensors(dir.file("out.safetensors")).at(0).second;
    at::NoGradGuard no_grad;
    model->eval();
    const at::Tensor ours = model->forward(ids);
    EXPECT_LE(max_abs_diff(ours, theirs), 1e-5) << variant;
    EXPECT_GT(max_abs_diff(ours, reference_outputs(variant).at("logits")), 1e-2)
        << variant << ": the changed weights should change the logits";
  }
}
