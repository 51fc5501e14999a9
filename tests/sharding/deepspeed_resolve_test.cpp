// Resolving a DeepSpeed config's "auto" entries from the program
// (src/sharding/deepspeed_config.h, resolve()): Accelerate's rules for each
// "auto", DeepSpeed's batch arithmetic, the precision rules, and the notes
// where the file's number wins over the program's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "accelerate/common/errors.h"
#include "sharding/deepspeed_config.h"

namespace accelerate::sharding {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::string template_path(const std::string& name) {
  return std::string(ACCELERATE_SOURCE_DIR) + "/tests/sharding/fixtures/" + name;
}

// A program that knows everything the templates leave to "auto".
ProgramValues full_program() {
  ProgramValues program;
  program.world_size = 2;
  program.micro_batch_size = 8;
  program.gradient_accumulation_steps = 1;
  program.mixed_precision = MixedPrecision::kFP16;
  program.hidden_size = 1024;
  program.lr = 1e-3;
  program.weight_decay = 0.01;
  program.total_num_steps = 1001;
  return program;
}

ResolvedDeepSpeedConfig resolve_text(const std::string& json_text, const ProgramValues& program) {
  return resolve(parse_deepspeed_config(json_text, "ds.json"), program);
}

std::string resolve_error(const std::string& json_text, const ProgramValues& program) {
  try {
    resolve_text(json_text, program);
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "(no error)";
}

// A stage-2 file with `extra` top-level members.
std::string stage2(const std::string& extra) {
  return R"({"zero_optimization": {"stage": 2})" + (extra.empty() ? "" : ", " + extra) + "}";
}

TEST(DeepSpeedResolveTemplates, EveryAutoGetsAccelerateNumbers) {
  for (const char* name :
       {"zero_stage1_config.json", "zero_stage2_config.json", "zero_stage2_offload_config.json",
        "zero_stage3_config.json", "zero_stage3_offload_config.json"}) {
    SCOPED_TRACE(name);
    const ResolvedDeepSpeedConfig r =
        resolve(read_deepspeed_config(template_path(name)), full_program());
    EXPECT_EQ(r.train_micro_batch_size_per_gpu, 8);  // the data loader's
    EXPECT_EQ(r.gradient_accumulation_steps, 1);     // the file's
    EXPECT_EQ(r.train_batch_size, 16);               // 8 * 1 * 2 processes
    EXPECT_EQ(r.gradient_clipping, 1.0);             // "auto" without a program value
    EXPECT_EQ(r.precision, MixedPrecision::kFP16);
    EXPECT_FALSE(r.fp16_auto_cast);
    EXPECT_EQ(r.loss_scaling.initial_scale_power, 16);
    const ResolvedZero& z = r.zero_optimization;
    const std::string file = name;
    EXPECT_EQ(z.stage, file.find("stage1") != std::string::npos   ? 1
                       : file.find("stage2") != std::string::npos ? 2
                                                                  : 3);
    EXPECT_EQ(z.reduce_bucket_size, 1024 * 1024);  // hidden^2
    // Stage-3 templates say "auto"; the others leave DeepSpeed's defaults.
    EXPECT_EQ(z.stage3_prefetch_bucket_size,
              z.stage == 3 ? 943718 : 50000000);  // int(0.9 * 1024 * 1024)
    EXPECT_EQ(z.stage3_param_persistence_threshold,
              z.stage == 3 ? 10 * 1024 : 100000);  // 10 * hidden
    EXPECT_FALSE(z.stage3_gather_16bit_weights_on_model_save);
    EXPECT_TRUE(z.overlap_comm);
    EXPECT_EQ(z.allgather_bucket_size, z.stage == 3 ? 500000000 : 200000000);
    EXPECT_EQ(z.offload_optimizer_device, file.find("offload") != std::string::npos
                                              ? OffloadDevice::kCpu
                                              : OffloadDevice::kNone);
    EXPECT_EQ(z.offload_param_device, file == "zero_stage3_offload_config.json"
                                          ? OffloadDevice::kCpu
                                          : OffloadDevice::kNone);
    EXPECT_EQ(std::get<double>(r.optimizer->params.at("lr")), 1e-3);
    EXPECT_EQ(std::get<double>(r.optimizer->params.at("weight_decay")), 0.01);
    const auto& schedule = r.scheduler->params;
    EXPECT_EQ(std::get<double>(schedule.at("warmup_min_lr")), 0);
    EXPECT_EQ(std::get<double>(schedule.at("warmup_max_lr")), 1e-3);
    EXPECT_EQ(std::get<double>(schedule.at("warmup_num_steps")), 0);
    EXPECT_EQ(std::get<double>(schedule.at("total_num_steps")), 501);  // ceil(1001 / 2)
    EXPECT_THAT(r.notes, IsEmpty());
  }
}

TEST(DeepSpeedResolveTemplates, Bf16ProgramIsRefusedBecauseTheTemplatesEnableFp16) {
  ProgramValues program = full_program();
  program.mixed_precision = MixedPrecision::kBF16;
  try {
    resolve(read_deepspeed_config(template_path("zero_stage2_config.json")), program);
    FAIL() << "no error";
  } catch (const ConfigError& error) {
    EXPECT_EQ(
        std::string(error.what()),
        template_path("zero_stage2_config.json") +
            ": fp16.enabled is true but mixed_precision is bf16; Accelerate refuses the pair: set "
            "fp16.enabled to false or \"auto\", or mixed_precision to fp16");
  }
}

TEST(DeepSpeedResolveBatch, TrainBatchSizeMustEqualMicroTimesAccumulationTimesWorld) {
  ProgramValues program = full_program();
  program.gradient_accumulation_steps = 2;
  EXPECT_EQ(
      resolve_error(stage2(R"("train_batch_size": 64, "train_micro_batch_size_per_gpu": "auto",
                                    "gradient_accumulation_steps": "auto")"),
                    program),
      "ds.json: train_batch_size is 64 but train_micro_batch_size_per_gpu * "
      "gradient_accumulation_steps * "
      "world size is 8 * 2 * 2 = 32");
  const auto r =
      resolve_text(stage2(R"("train_batch_size": 32, "train_micro_batch_size_per_gpu": "auto",
                                       "gradient_accumulation_steps": "auto")"),
                   program);
  EXPECT_EQ(r.train_batch_size, 32);
  EXPECT_EQ(r.gradient_accumulation_steps, 2);
  EXPECT_THAT(r.notes, IsEmpty());
}

TEST(DeepSpeedResolveBatch, TheFilesAccumulationWinsWithANote) {
  ProgramValues program = full_program();
  program.gradient_accumulation_steps = 2;
  auto r = resolve_text(
      stage2(R"("train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 4)"),
      program);
  EXPECT_EQ(r.gradient_accumulation_steps, 4);
  EXPECT_EQ(r.train_batch_size, 8 * 4 * 2);
  EXPECT_THAT(
      r.notes,
      ElementsAre("ds.json: gradient_accumulation_steps is 4 but the Accelerator's "
                  "gradient_accumulation_steps is 2; the file's 4 is used, as in Accelerate "
                  "(write \"auto\" to use the Accelerator's)"));
  // Absent: Accelerate writes 1.
  r = resolve_text(stage2(R"("train_micro_batch_size_per_gpu": "auto")"), program);
  EXPECT_EQ(r.gradient_accumulation_steps, 1);
  EXPECT_THAT(
      r.notes,
      ElementsAre("ds.json: gradient_accumulation_steps is not set, which Accelerate reads as 1, "
                  "but the Accelerator's gradient_accumulation_steps is 2; the file's 1 is used, "
                  "as in Accelerate (write \"auto\" to use the Accelerator's)"));
}

TEST(DeepSpeedResolveBatch, MicroBatchRules) {
  ProgramValues program = full_program();
  program.micro_batch_size.reset();
  EXPECT_EQ(resolve_error(stage2(R"("train_micro_batch_size_per_gpu": "auto")"), program),
            "ds.json: train_micro_batch_size_per_gpu is \"auto\" but the program prepared no data "
            "loader before or with its optimizer; prepare the loader with the optimizer, or write "
            "a number");
  EXPECT_EQ(resolve_error(stage2(R"("train_batch_size": "auto")"), program),
            "ds.json: train_batch_size is \"auto\" but train_micro_batch_size_per_gpu is not set; "
            "Accelerate "
            "computes the first from the second (set that to \"auto\" or a number)");
  EXPECT_EQ(resolve_error(stage2(""), program),
            "ds.json: neither train_batch_size nor train_micro_batch_size_per_gpu is set; "
            "DeepSpeed needs one "
            "(\"auto\" takes the data loader's batch size)");
  // DeepSpeed derives the micro batch from train_batch_size when it divides.
  program.world_size = 4;
  EXPECT_EQ(
      resolve_text(stage2(R"("train_batch_size": 32)"), program).train_micro_batch_size_per_gpu, 8);
  program.micro_batch_size = 8;
  EXPECT_THAT(resolve_text(stage2(R"("train_batch_size": 64)"), program).notes,
              ElementsAre("ds.json: train_batch_size 64 gives 16 samples per process and step, but "
                          "the data loader's batch size per process is 8"));
  EXPECT_EQ(resolve_error(stage2(R"("train_batch_size": 30)"), program),
            "ds.json: train_batch_size 30 is not a multiple of gradient_accumulation_steps * world "
            "size = 1 * 4 = 4");
  // A number that differs from the loader's: the file's goes to DeepSpeed, with a note.
  program.micro_batch_size = 16;
  const auto r = resolve_text(stage2(R"("train_micro_batch_size_per_gpu": 4)"), program);
  EXPECT_EQ(r.train_batch_size, 16);
  EXPECT_THAT(
      r.notes,
      ElementsAre("ds.json: train_micro_batch_size_per_gpu is 4 but the data loader's batch size "
                  "per process is 16; DeepSpeed is given the file's 4"));
}

TEST(DeepSpeedResolveClipping, AutoAbsentAndNumber) {
  ProgramValues program = full_program();
  const std::string batch = R"("train_micro_batch_size_per_gpu": "auto", )";
  EXPECT_EQ(
      resolve_text(stage2(batch + R"("gradient_clipping": "auto")"), program).gradient_clipping,
      1.0);
  program.gradient_clipping = 0.5;
  EXPECT_EQ(
      resolve_text(stage2(batch + R"("gradient_clipping": "auto")"), program).gradient_clipping,
      0.5);
  auto r = resolve_text(stage2(batch + R"("gradient_clipping": 2)"), program);
  EXPECT_EQ(r.gradient_clipping, 2.0);
  EXPECT_THAT(
      r.notes,
      ElementsAre("ds.json: gradient_clipping is 2 but the program's gradient clipping is 0.5; "
                  "the file's 2 is used, as in Accelerate"));
  r = resolve_text(stage2(R"("train_micro_batch_size_per_gpu": "auto")"), program);
  EXPECT_EQ(r.gradient_clipping, 0.0);
  EXPECT_THAT(
      r.notes,
      ElementsAre("ds.json: gradient_clipping is not set, so gradients are not clipped although "
                  "the program's gradient clipping is 0.5 (write \"auto\" to use it)"));
}

TEST(DeepSpeedResolvePrecision, AccelerateRules) {
  ProgramValues program = full_program();
  const std::string batch = R"("train_micro_batch_size_per_gpu": "auto")";
  const auto precision_of = [&](const std::string& sections, MixedPrecision wanted) {
    program.mixed_precision = wanted;
    return resolve_text(stage2(batch + sections), program);
  };
  // No section: Accelerate adds the wanted one, fp16 with auto_cast.
  EXPECT_EQ(precision_of("", MixedPrecision::kFP16).precision, MixedPrecision::kFP16);
  EXPECT_TRUE(precision_of("", MixedPrecision::kFP16).fp16_auto_cast);
  EXPECT_EQ(precision_of("", MixedPrecision::kBF16).precision, MixedPrecision::kBF16);
  EXPECT_EQ(precision_of("", MixedPrecision::kNo).precision, MixedPrecision::kNo);
  // "auto" follows mixed_precision.
  const std::string autos = R"(, "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"})";
  EXPECT_EQ(precision_of(autos, MixedPrecision::kBF16).precision, MixedPrecision::kBF16);
  EXPECT_EQ(precision_of(autos, MixedPrecision::kFP16).precision, MixedPrecision::kFP16);
  EXPECT_FALSE(precision_of(autos, MixedPrecision::kFP16).fp16_auto_cast);
  EXPECT_EQ(precision_of(autos, MixedPrecision::kNo).precision, MixedPrecision::kNo);
  // A literal true with mixed_precision "no": the file wins, with a note.
  const auto r = precision_of(R"(, "bf16": {"enabled": true})", MixedPrecision::kNo);
  EXPECT_EQ(r.precision, MixedPrecision::kBF16);
  EXPECT_THAT(
      r.notes,
      ElementsAre("ds.json: bf16.enabled is true but mixed_precision is no; the file wins, as in "
                  "Accelerate, and the run computes in bf16"));
  // A section without "enabled" is DeepSpeed's false, even when fp16 is wanted.
  const auto off = precision_of(R"(, "fp16": {"loss_scale": 0})", MixedPrecision::kFP16);
  EXPECT_EQ(off.precision, MixedPrecision::kNo);
  EXPECT_THAT(
      off.notes,
      ElementsAre("ds.json: fp16.enabled is not set (false) but mixed_precision is fp16; the file "
                  "wins, as in Accelerate, and the run computes in fp32"));
  EXPECT_EQ(
      resolve_error(stage2(batch + R"(, "bf16": {"enabled": true})"), program),
      "ds.json: bf16.enabled is true but mixed_precision is fp16; Accelerate refuses the pair: set "
      "bf16.enabled to false or \"auto\", or mixed_precision to bf16");
  program.mixed_precision = MixedPrecision::kNo;
  EXPECT_EQ(
      resolve_error(stage2(batch + R"(, "bf16": {"enabled": true}, "fp16": {"enabled": true})"),
                    program),
      "ds.json: fp16.enabled and bf16.enabled are both true; DeepSpeed allows one of them");
}

TEST(DeepSpeedResolveZero, LaunchDefaultsAndHiddenSize) {
  ProgramValues program = full_program();
  auto r = resolve_text(R"({"train_micro_batch_size_per_gpu": 1,
      "zero_optimization": {"stage": "auto", "offload_optimizer": {"device": "auto"},
                            "stage3_gather_16bit_weights_on_model_save": true}})",
                        program);
  EXPECT_EQ(r.zero_optimization.stage, 2);  // Accelerate's default stage
  EXPECT_EQ(r.zero_optimization.offload_optimizer_device, OffloadDevice::kNone);
  EXPECT_TRUE(r.zero_optimization.stage3_gather_16bit_weights_on_model_save);
  EXPECT_FALSE(r.zero_optimization.overlap_comm);  // DeepSpeed: on at stage 3 only
  // DeepSpeed's defaults when absent.
  EXPECT_EQ(r.zero_optimization.reduce_bucket_size, 500000000);
  EXPECT_EQ(r.zero_optimization.stage3_prefetch_bucket_size, 50000000);
  EXPECT_EQ(r.zero_optimization.stage3_param_persistence_threshold, 100000);
  r = resolve_text(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}})",
                   program);
  EXPECT_EQ(r.zero_optimization.stage, 3);
  EXPECT_TRUE(r.zero_optimization.overlap_comm);
  program.hidden_size.reset();
  EXPECT_EQ(resolve_error(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3,
                 "reduce_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"}})",
                          program),
            "ds.json: zero_optimization.reduce_bucket_size, "
            "zero_optimization.stage3_param_persistence_threshold "
            "\"auto\" needs the model's hidden size, which the program did not give; write numbers "
            "instead");
  // A caller that does not size anything from them (the Accelerator) leaves them unfilled.
  program.needs_hidden_size_keys = false;
  r = resolve_text(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2,
                 "reduce_bucket_size": "auto"}})",
                   program);
  EXPECT_EQ(r.zero_optimization.reduce_bucket_size, 0);
}

TEST(DeepSpeedResolveParams, OptimizerAndSchedulerAutos) {
  ProgramValues program = full_program();
  program.betas = std::array<double, 2>{0.9, 0.95};
  program.eps = 1e-8;
  program.warmup_num_steps = 50;
  program.split_batches = true;
  const std::string sections = R"("train_micro_batch_size_per_gpu": 2,
      "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": 0}},
      "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": "auto", "total_num_steps": "auto"}})";
  const auto r = resolve_text(stage2(sections), program);
  EXPECT_EQ(std::get<std::vector<double>>(r.optimizer->params.at("betas")),
            (std::vector<double>{0.9, 0.95}));
  EXPECT_EQ(std::get<double>(r.optimizer->params.at("eps")), 1e-8);
  EXPECT_EQ(std::get<double>(r.optimizer->params.at("weight_decay")), 0);  // the file's
  EXPECT_EQ(std::get<double>(r.scheduler->params.at("warmup_num_steps")), 50);
  EXPECT_EQ(std::get<double>(r.scheduler->params.at("total_num_steps")),
            1001);  // split batches: not divided
  program.lr.reset();
  EXPECT_EQ(resolve_error(stage2(sections), program),
            "ds.json: optimizer.params.lr is \"auto\" but the program gave no learning rate; write "
            "a value");
  program = full_program();
  program.total_num_steps.reset();
  EXPECT_EQ(
      resolve_error(stage2(sections), program),
      "ds.json: optimizer.params.betas is \"auto\" but the program gave no betas; write a value");
  program.betas = std::array<double, 2>{0.9, 0.999};
  program.eps = 1e-6;
  EXPECT_EQ(resolve_error(stage2(sections), program),
            "ds.json: scheduler.params.total_num_steps is \"auto\" but the program gave no total "
            "number of "
            "training steps; write a value");
}

TEST(DeepSpeedResolveProgram, MalformedProgramValuesAreAProgrammingError) {
  ProgramValues program = full_program();
  program.world_size = 0;
  EXPECT_THROW(resolve_text(stage2(""), program), std::invalid_argument);
}

}  // namespace
}  // namespace accelerate::sharding
