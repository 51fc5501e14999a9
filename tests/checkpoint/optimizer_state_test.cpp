// Optimizer state in checkpoints (format version 2): the built-in
// optimizers' state tensors in optimizer.safetensors and the rest in
// optimizer.bin come back bitwise, options and steps included; LBFGS keeps
// the whole archive; a format-1 checkpoint still loads; a missing or damaged
// tensor file is an Error naming it, raised before anything changes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/common/errors.h"
#include "compat/optim_compat.h"
#include "support/error_message.h"
#include "support/process_runner.h"
#include "support/thread_ranks.h"

namespace accelerate {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::TemporaryFolder;
namespace optim = torch::optim;

// Every case: non-default options, two param groups (weight; bias with its
// own learning rate).
struct AdamCase {
  using Opt = optim::Adam;
  using Options = optim::AdamOptions;
  using State = optim::AdamParamState;
  static Options options() {
    return Options(0.05).amsgrad(true).weight_decay(0.01).betas({0.8, 0.95});
  }
  static std::vector<at::Tensor> tensors(const State& s) {
    return {s.exp_avg(), s.exp_avg_sq(), s.max_exp_avg_sq()};
  }
  static int64_t step(const State& s) { return s.step(); }
  static size_t tensor_count() { return 3; }
};
struct AdamWCase {
  using Opt = optim::AdamW;
  using Options = optim::AdamWOptions;
  using State = optim::AdamWParamState;
  static Options options() { return Options(0.05).weight_decay(0.2).eps(1e-6); }
  static std::vector<at::Tensor> tensors(const State& s) {
    return {s.exp_avg(), s.exp_avg_sq(), s.max_exp_avg_sq()};
  }
  static int64_t step(const State& s) { return s.step(); }
  static size_t tensor_count() { return 2; }
};
struct SGDCase {
  using Opt = optim::SGD;
  using Options = optim::SGDOptions;
  using State = optim::SGDParamState;
  static Options options() { return Options(0.1).momentum(0.9).nesterov(true).weight_decay(0.01); }
  static std::vector<at::Tensor> tensors(const State& s) { return {s.momentum_buffer()}; }
  static int64_t step(const State&) { return 0; }
  static size_t tensor_count() { return 1; }
};
struct RMSpropCase {
  using Opt = optim::RMSprop;
  using Options = optim::RMSpropOptions;
  using State = optim::RMSpropParamState;
  static Options options() { return Options(0.01).centered(true).momentum(0.5).alpha(0.9); }
  static std::vector<at::Tensor> tensors(const State& s) {
    return {s.square_avg(), s.momentum_buffer(), s.grad_avg()};
  }
  static int64_t step(const State& s) { return s.step(); }
  static size_t tensor_count() { return 3; }
};
struct AdagradCase {
  using Opt = optim::Adagrad;
  using Options = optim::AdagradOptions;
  using State = optim::AdagradParamState;
  static Options options() {
    return Options(0.1).lr_decay(0.01).initial_accumulator_value(0.25).weight_decay(0.01);
  }
  static std::vector<at::Tensor> tensors(const State& s) { return {s.sum()}; }
  static int64_t step(const State& s) { return s.step(); }
  static size_t tensor_count() { return 1; }
};

template <class Options>
std::vector<optim::OptimizerParamGroup> two_groups(torch::nn::Linear& model,
                                                   const Options& options) {
  auto bias_options = std::make_unique<Options>(options);
  bias_options->set_lr(options.get_lr() * 3);
  std::vector<optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<at::Tensor>{model->weight});
  groups.emplace_back(std::vector<at::Tensor>{model->bias}, std::move(bias_options));
  return groups;
}

// A Linear model and an optimizer of the case's type, prepared.
template <class Case>
struct TrainedRun {
  TrainedRun(std::shared_ptr<Communicator> comm, const typename Case::Options& options)
      : accelerator(std::move(comm)),
        model(torch::nn::Linear(4, 3)),
        optimizer(two_groups(model, options), options) {
    accelerator.prepare(model, optimizer);
  }
  void train(int steps) {
    const auto input = at::arange(32, at::kFloat).reshape({8, 4}) / 10;
    for (int i = 0; i < steps; ++i) {
      accelerator.backward(model->forward(input).sin().pow(2).mean());
      optimizer.step();
      optimizer.zero_grad();
    }
  }
  std::vector<at::Tensor> params() const {
    return {model->weight.detach().clone(), model->bias.detach().clone()};
  }

  Accelerator accelerator;
  torch::nn::Linear model;
  Optimizer<typename Case::Opt> optimizer;
};

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes() || a.device() != b.device()) {
    return false;
  }
  const auto ca = a.contiguous();
  const auto cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

void expect_bitwise(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(bitwise_equal(a[i], b[i])) << i << a[i] << b[i];
}

using testing::error_of;

// Per parameter (weight, bias): the state's tensors and step.
template <class Case>
std::vector<std::pair<std::vector<at::Tensor>, int64_t>> state_values(
    const Optimizer<typename Case::Opt>& optimizer) {
  std::vector<std::pair<std::vector<at::Tensor>, int64_t>> values;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& param : group.params()) {
      const auto* state =
          dynamic_cast<const typename Case::State*>(compat::param_state(optimizer, param));
      if (state == nullptr) {
        ADD_FAILURE() << "no state for a parameter";
        continue;
      }
      values.emplace_back(Case::tensors(*state), Case::step(*state));
    }
  }
  return values;
}

template <class Case>
class OptimizerStateRoundTrip : public ::testing::Test {};
using Cases = ::testing::Types<AdamCase, AdamWCase, SGDCase, RMSpropCase, AdagradCase>;
TYPED_TEST_SUITE(OptimizerStateRoundTrip, Cases);

TYPED_TEST(OptimizerStateRoundTrip, EveryTensorOptionAndStepComesBackBitwise) {
  using Case = TypeParam;
  TemporaryFolder tmp;
  const std::string dir = tmp.path() + "/ckpt";
  testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    torch::manual_seed(0);
    TrainedRun<Case> first(comm, Case::options());
    first.train(3);
    for (auto& group : first.optimizer.param_groups()) {  // as a scheduler's decay would
      group.options().set_lr(group.options().get_lr() * 0.37);
    }
    first.accelerator.save_state(dir);

    torch::manual_seed(1);  // other weights, default options: all must come from the checkpoint
    TrainedRun<Case> second(comm, typename Case::Options(0.5));
    second.accelerator.load_state(dir);
    const auto expected = state_values<Case>(first.optimizer);
    const auto loaded = state_values<Case>(second.optimizer);
    ASSERT_EQ(expected.size(), 2u);
    ASSERT_EQ(loaded.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      expect_bitwise(loaded[i].first, expected[i].first);
      EXPECT_EQ(loaded[i].second, expected[i].second);
      size_t defined = 0;
      for (const auto& t : loaded[i].first) defined += t.defined();
      EXPECT_EQ(defined, Case::tensor_count());
    }
    for (size_t g = 0; g < 2; ++g) {
      const auto& a =
          static_cast<const typename Case::Options&>(first.optimizer.param_groups()[g].options());
      const auto& b =
          static_cast<const typename Case::Options&>(second.optimizer.param_groups()[g].options());
      EXPECT_TRUE(a == b) << "param group " << g;
      EXPECT_EQ(a.get_lr(), b.get_lr());
    }
    expect_bitwise(second.params(), first.params());
    first.train(1);
    second.train(1);
    expect_bitwise(second.params(), first.params());
  });
  EXPECT_TRUE(fs::is_regular_file(fs::path(dir) / "optimizer.safetensors"));
  const auto tensors = load_safetensors(dir + "/optimizer.safetensors");
  EXPECT_EQ(tensors.size(), 2 * Case::tensor_count());
  bool has_bias = false;
  for (const auto& [name, tensor] : tensors) has_bias |= name.rfind("state.1.", 0) == 0;
  EXPECT_TRUE(has_bias);  // the bias is parameter 1, in the second group
  EXPECT_LT(fs::file_size(fs::path(dir) / "optimizer.bin"), 64u * 1024);
}

TEST(OptimizerState, AnOptimizerWithoutStateRoundTrips) {
  TemporaryFolder tmp;
  testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    TrainedRun<AdamCase> run(comm, AdamCase::options());
    run.accelerator.save_state(tmp.path() + "/empty");
    TrainedRun<AdamCase> other(comm, AdamCase::Options(0.5));
    other.accelerator.load_state(tmp.path() + "/empty");
    EXPECT_TRUE(other.optimizer.state().empty());
    EXPECT_EQ(other.optimizer.param_groups()[1].options().get_lr(),
              AdamCase::options().get_lr() * 3);
  });
}

TEST(OptimizerState, ReloadingIntoLiveStateLeavesTensorsHeldElsewhereAlone) {
  TemporaryFolder tmp;
  const std::string dir = tmp.path() + "/ckpt";
  testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    torch::manual_seed(0);
    TrainedRun<AdamCase> run(comm, AdamCase::options());
    run.train(3);
    run.accelerator.save_state(dir);
    const auto saved = state_values<AdamCase>(run.optimizer);
    std::vector<std::vector<at::Tensor>> saved_copies;
    for (const auto& [tensors, step] : saved) {
      saved_copies.emplace_back();
      for (const auto& t : tensors) saved_copies.back().push_back(t.defined() ? t.clone() : t);
    }
    const auto params = run.params();
    run.train(2);  // moves away from the checkpoint
    // Someone holds the weight's exp_avg: loading must not overwrite it.
    const at::Tensor held = state_values<AdamCase>(run.optimizer)[0].first[0];
    const at::Tensor held_value = held.clone();
    run.accelerator.load_state(dir);
    const void* bias_exp_avg = state_values<AdamCase>(run.optimizer)[1].first[0].data_ptr();
    run.accelerator.load_state(dir);  // again: reads into the tensors the first load made
    EXPECT_EQ(state_values<AdamCase>(run.optimizer)[1].first[0].data_ptr(), bias_exp_avg);
    const auto loaded = state_values<AdamCase>(run.optimizer);
    ASSERT_EQ(loaded.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      expect_bitwise(loaded[i].first, saved_copies[i]);
      EXPECT_EQ(loaded[i].second, 3);
    }
    expect_bitwise({held}, {held_value});
    expect_bitwise(run.params(), params);
  });
}

TEST(OptimizerState, LbfgsKeepsTheWholeArchive) {
  TemporaryFolder tmp;
  const std::string dir = tmp.path() + "/ckpt";
  testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    const auto input = at::arange(12, at::kFloat).reshape({4, 3}) / 10;
    // A history that fills within the run: LibTorch's own LBFGS::save throws
    // ("Cannot access storage of UndefinedTensorImpl") while `al` still has
    // unset entries, with or without accelerate.
    auto make = [&](double lr) {
      auto model = torch::nn::Linear(3, 2);
      auto optimizer = std::make_unique<Optimizer<optim::LBFGS>>(
          model->parameters(), optim::LBFGSOptions(lr).history_size(2).max_iter(5));
      return std::make_pair(model, std::move(optimizer));
    };
    auto step = [&](torch::nn::Linear& model, optim::Optimizer& optimizer) {
      optimizer.step([&] {
        optimizer.zero_grad();
        auto loss = model->forward(input).pow(2).mean();
        loss.backward();
        return loss;
      });
    };
    torch::manual_seed(0);
    Accelerator first(comm);
    auto [model, optimizer] = make(0.5);
    first.prepare(model, *optimizer);
    step(model, *optimizer);
    step(model, *optimizer);
    first.save_state(dir);

    torch::manual_seed(1);
    Accelerator second(comm);
    auto [model2, optimizer2] = make(0.5);
    second.prepare(model2, *optimizer2);
    second.load_state(dir);
    step(model, *optimizer);
    step(model2, *optimizer2);
    expect_bitwise({model2->weight, model2->bias}, {model->weight, model->bias});
  });
  EXPECT_TRUE(fs::is_regular_file(fs::path(dir) / "optimizer.bin"));
  EXPECT_FALSE(fs::exists(fs::path(dir) / "optimizer.safetensors"));
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(OptimizerState, AFormatOneCheckpointStillLoads) {
  TemporaryFolder tmp;
  const std::string dir = tmp.path() + "/ckpt";
  testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    torch::manual_seed(0);
    TrainedRun<AdamCase> first(comm, AdamCase::options());
    first.train(3);
    first.optimizer.param_groups()[0].options().set_lr(0.0123);
    first.accelerator.save_state(dir);
    // Rewrite it as format version 1 wrote it: the whole Optimizer::save.
    fs::remove(fs::path(dir) / "optimizer.safetensors");
    torch::serialize::OutputArchive archive;
    first.optimizer.save(archive);
    archive.save_to(dir + "/optimizer.bin");
    const std::string json_path = dir + "/accelerate_checkpoint.json";
    std::string json = read_text(json_path);
    const std::string version = "\"format_version\": 2";
    ASSERT_NE(json.find(version), std::string::npos) << json;
    json.replace(json.find(version), version.size(), "\"format_version\": 1");
    std::ofstream(json_path) << json;

    torch::manual_seed(1);
    TrainedRun<AdamCase> second(comm, AdamCase::Options(0.5));
    second.accelerator.load_state(dir);
    EXPECT_EQ(second.optimizer.param_groups()[0].options().get_lr(), 0.0123);
    const auto expected = state_values<AdamCase>(first.optimizer);
    const auto loaded = state_values<AdamCase>(second.optimizer);
    ASSERT_EQ(loaded.size(), expected.size());
    for (size_t i = 0; i < loaded.size(); ++i) {
      expect_bitwise(loaded[i].first, expected[i].first);
      EXPECT_EQ(loaded[i].second, expected[i].second);
    }
    first.train(1);
    second.train(1);
    expect_bitwise(second.params(), first.params());
  });
}

// Saves a trained Adam run into `dir`, lets `damage` edit the folder, then
// loads into a fresh run: returns the error, and checks that nothing changed.
std::string load_error_after(const std::string& dir,
                             const std::function<void(const std::string&)>& damage) {
  std::string error;
  testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    torch::manual_seed(0);
    TrainedRun<AdamCase> first(comm, AdamCase::options());
    first.train(2);
    first.accelerator.save_state(dir);
    damage(dir + "/optimizer.safetensors");
    torch::manual_seed(1);
    TrainedRun<AdamCase> second(comm, AdamCase::Options(0.5));
    const auto before = second.params();
    error = error_of([&] { second.accelerator.load_state(dir); });
    expect_bitwise(second.params(), before);  // the model was not loaded either
    EXPECT_TRUE(second.optimizer.state().empty());
    EXPECT_EQ(second.optimizer.param_groups()[0].options().get_lr(), 0.5);
  });
  return error;
}

void rewrite(const std::string& path, const std::function<void(NamedTensors&)>& edit) {
  NamedTensors tensors = load_safetensors(path);
  edit(tensors);
  save_safetensors(path, tensors);
}

TEST(OptimizerState, AMissingOrDamagedTensorFileIsAnErrorNamingIt) {
  TemporaryFolder tmp;
  EXPECT_THAT(
      load_error_after(tmp.path() + "/a", [](const std::string& path) { fs::remove(path); }),
      AllOf(HasSubstr("optimizer.safetensors"), HasSubstr("missing")));
  EXPECT_THAT(load_error_after(
                  tmp.path() + "/b",
                  [](const std::string& path) { fs::resize_file(path, fs::file_size(path) / 2); }),
              HasSubstr("optimizer.safetensors"));
  EXPECT_THAT(load_error_after(tmp.path() + "/c",
                               [](const std::string& path) {
                                 std::ofstream(path, std::ios::trunc) << "not safetensors";
                               }),
              HasSubstr("optimizer.safetensors"));
  EXPECT_THAT(load_error_after(tmp.path() + "/d",
                               [](const std::string& path) {
                                 rewrite(path, [](NamedTensors& tensors) {
                                   tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                                                                [](const auto& t) {
                                                                  return t.first ==
                                                                         "state.1.exp_avg";
                                                                }),
                                                 tensors.end());
                                 });
                               }),
              AllOf(HasSubstr("optimizer.safetensors"), HasSubstr("state.1.exp_avg"),
                    HasSubstr("missing")));
  EXPECT_THAT(load_error_after(tmp.path() + "/e",
                               [](const std::string& path) {
                                 rewrite(path, [](NamedTensors& tensors) {
                                   for (auto& [name, tensor] : tensors) {
                                     if (name == "state.0.exp_avg_sq") tensor = at::zeros({4, 3});
                                   }
                                 });
                               }),
              AllOf(HasSubstr("optimizer.safetensors"), HasSubstr("state.0.exp_avg_sq"),
                    HasSubstr("shape")));
}

TEST(OptimizerState, AnotherOptimizerTypeIsRefused) {
  TemporaryFolder tmp;
  const std::string dir = tmp.path() + "/ckpt";
  testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    TrainedRun<AdamCase> adam(comm, AdamCase::options());
    adam.train(1);
    adam.accelerator.save_state(dir);
    TrainedRun<SGDCase> sgd(comm, SGDCase::options());
    EXPECT_THAT(error_of([&] { sgd.accelerator.load_state(dir); }),
                AllOf(HasSubstr("optimizer.bin"), HasSubstr("Adam")));
  });
}

}  // namespace
}  // namespace accelerate
