// Reading DeepSpeed JSON config files (src/sharding/deepspeed_config.h): the
// Accelerate templates, every value check and its one-line message, keys we
// refuse, keys we list as ignored, and the accelerate-config (YAML) check.
// Resolution ("auto" filling) is in deepspeed_resolve_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "accelerate/common/errors.h"
#include "sharding/deepspeed_config.h"

namespace accelerate::sharding {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// The five files Hugging Face Accelerate ships as examples
// (examples/deepspeed_config_templates/ in its repository), reproduced key
// for key under tests/sharding/fixtures/.
std::string fixture(const std::string& name) {
  return std::string(ACCELERATE_SOURCE_DIR) + "/tests/sharding/fixtures/" + name;
}

std::string parse_error(const std::string& json_text) {
  try {
    parse_deepspeed_config(json_text, "ds.json");
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "(no error)";
}

// A minimal valid file with `extra` top-level members appended.
std::string with(const std::string& extra) {
  return R"({"zero_optimization": {"stage": 2})" + (extra.empty() ? "" : ", " + extra) + "}";
}

std::string zero_with(const std::string& members) {
  return R"({"zero_optimization": {)" + members + "}}";
}

TEST(DeepSpeedConfigTemplates, StageOneAndTwoLoad) {
  for (const char* name : {"zero_stage1_config.json", "zero_stage2_config.json"}) {
    const DeepSpeedConfig config = read_deepspeed_config(fixture(name));
    EXPECT_EQ(config.source, fixture(name));
    const ZeroSettings& zero = config.zero_optimization;
    EXPECT_EQ(zero.stage.value, name == std::string("zero_stage1_config.json") ? 1 : 2);
    EXPECT_TRUE(zero.stage.has_value());
    EXPECT_EQ(zero.allgather_bucket_size, 200000000);  // written 2e8
    EXPECT_TRUE(zero.reduce_bucket_size.is_auto());
    EXPECT_EQ(zero.overlap_comm, std::optional<bool>(true));
    EXPECT_TRUE(zero.allgather_partitions && zero.reduce_scatter && zero.contiguous_gradients);
    EXPECT_TRUE(zero.offload_optimizer.device.absent());
    EXPECT_TRUE(config.fp16.present && config.fp16.enabled.has_value() &&
                config.fp16.enabled.value);
    EXPECT_EQ(config.fp16.loss_scaling.loss_scale, 0);
    EXPECT_EQ(config.fp16.loss_scaling.loss_scale_window, 1000);
    EXPECT_EQ(config.fp16.loss_scaling.initial_scale_power, 16);
    EXPECT_EQ(config.fp16.loss_scaling.hysteresis, 2);
    EXPECT_EQ(config.fp16.loss_scaling.min_loss_scale, 1);
    EXPECT_FALSE(config.bf16.present);
    EXPECT_TRUE(config.train_batch_size.is_auto());
    EXPECT_TRUE(config.train_micro_batch_size_per_gpu.is_auto());
    EXPECT_EQ(config.gradient_accumulation_steps.value, 1);
    EXPECT_TRUE(config.gradient_clipping.is_auto());
    ASSERT_TRUE(config.optimizer.has_value());
    EXPECT_EQ(config.optimizer->type, "AdamW");
    EXPECT_TRUE(config.optimizer->params.at("lr").is_auto());
    EXPECT_TRUE(config.optimizer->params.at("weight_decay").is_auto());
    EXPECT_EQ(std::get<bool>(config.optimizer->params.at("torch_adam").value), true);
    EXPECT_EQ(std::get<bool>(config.optimizer->params.at("adam_w_mode").value), true);
    ASSERT_TRUE(config.scheduler.has_value());
    EXPECT_EQ(config.scheduler->type, "WarmupDecayLR");
    EXPECT_EQ(config.scheduler->params.size(), 4u);
    // steps_per_print and wall_clock_breakdown are logging only: not listed.
    EXPECT_THAT(config.ignored_keys, IsEmpty());
  }
}

TEST(DeepSpeedConfigTemplates, OffloadAndStageThreeLoad) {
  const DeepSpeedConfig offload2 =
      read_deepspeed_config(fixture("zero_stage2_offload_config.json"));
  EXPECT_EQ(offload2.zero_optimization.offload_optimizer.device.value, OffloadDevice::kCpu);
  EXPECT_TRUE(offload2.zero_optimization.offload_optimizer.pin_memory);
  EXPECT_TRUE(offload2.zero_optimization.offload_param.device.absent());
  EXPECT_THAT(offload2.ignored_keys, IsEmpty());

  for (const char* name : {"zero_stage3_config.json", "zero_stage3_offload_config.json"}) {
    const DeepSpeedConfig config = read_deepspeed_config(fixture(name));
    const ZeroSettings& zero = config.zero_optimization;
    EXPECT_EQ(zero.stage.value, 3);
    EXPECT_TRUE(zero.stage3_prefetch_bucket_size.is_auto());
    EXPECT_TRUE(zero.stage3_param_persistence_threshold.is_auto());
    EXPECT_TRUE(zero.stage3_gather_16bit_weights_on_model_save.is_auto());
    EXPECT_EQ(zero.sub_group_size, 1000000000);  // written 1e9
    EXPECT_EQ(zero.stage3_max_live_parameters, 1000000000);
    EXPECT_EQ(zero.stage3_max_reuse_distance, 1000000000);
    const bool offloads = name == std::string("zero_stage3_offload_config.json");
    EXPECT_EQ(zero.offload_param.device.has_value(), offloads);
    EXPECT_EQ(zero.offload_optimizer.device.has_value(), offloads);
    EXPECT_EQ(config.optimizer->params.size(), 2u);
    EXPECT_THAT(config.ignored_keys, IsEmpty());
  }
}

TEST(DeepSpeedConfigRead, MissingFileNamesThePath) {
  const std::string path = "/nonexistent/zero2.json";
  try {
    read_deepspeed_config(path);
    FAIL() << "no error";
  } catch (const ConfigError& error) {
    EXPECT_EQ(std::string(error.what()),
              path + ": cannot read the DeepSpeed config file: No such file or directory");
  }
  try {
    read_deepspeed_config(ACCELERATE_SOURCE_DIR);
    FAIL() << "no error";
  } catch (const ConfigError& error) {
    EXPECT_EQ(std::string(error.what()),
              std::string(ACCELERATE_SOURCE_DIR) +
                  ": cannot read the DeepSpeed config file: it is a directory");
  }
}

TEST(DeepSpeedConfigParse, MalformedJsonNamesFileLineAndColumn) {
  EXPECT_EQ(
      parse_error("{\n  \"zero_optimization\": {\"stage\": 2},\n  \"fp16\" {}\n}"),
      "ds.json: line 3, column 10: not valid JSON: syntax error while parsing object separator - "
      "unexpected '{'; expected ':'");
  EXPECT_THAT(parse_error(""), HasSubstr("ds.json: line 1, column 1: not valid JSON: "));
  // Python's reader takes NaN; JSON does not, and neither do we.
  EXPECT_THAT(parse_error(with(R"("gradient_clipping": NaN)")),
              HasSubstr("ds.json: line 1, column 58: not valid JSON: "));
  EXPECT_EQ(parse_error("[1, 2]"), "ds.json: expects a JSON object at the top level, got '[1,2]'");
}

TEST(DeepSpeedConfigParse, DuplicateKeysAreRefusedWithTheirPath) {
  EXPECT_EQ(parse_error(zero_with(R"("stage": 2, "stage": 3)")),
            "ds.json: duplicate key 'zero_optimization.stage'");
  EXPECT_EQ(parse_error(with(R"("fp16": {}, "fp16": {})")), "ds.json: duplicate key 'fp16'");
  // The same name in different objects is fine.
  EXPECT_EQ(parse_error(with(R"("fp16": {"enabled": true}, "bf16": {"enabled": false})")),
            "(no error)");
}

TEST(DeepSpeedConfigParse, ZeroSectionIsRequiredAndItsStageChecked) {
  EXPECT_EQ(parse_error("{}"),
            "ds.json: zero_optimization is missing; Accelerate requires it (e.g. {\"stage\": 2})");
  EXPECT_EQ(parse_error(R"({"zero_optimization": true})"),
            "ds.json: zero_optimization expects an object such as {\"stage\": 2}, got 'true'");
  EXPECT_EQ(parse_error(zero_with(R"("stage": 5)")),
            "ds.json: zero_optimization.stage expects 0, 1, 2, 3 or \"auto\", got '5'");
  EXPECT_EQ(parse_error(zero_with(R"("stage": "2")")),
            "ds.json: zero_optimization.stage expects 0, 1, 2, 3 or \"auto\", got '\"2\"'");
  EXPECT_TRUE(parse_deepspeed_config(zero_with(R"("stage": "auto")"), "ds.json")
                  .zero_optimization.stage.is_auto());
  EXPECT_TRUE(parse_deepspeed_config(zero_with(""), "ds.json").zero_optimization.stage.absent());
}

TEST(DeepSpeedConfigParse, BatchSizesMustBePositiveIntegers) {
  EXPECT_EQ(
      parse_error(with(R"("train_micro_batch_size_per_gpu": 8.5)")),
      "ds.json: train_micro_batch_size_per_gpu expects a positive integer or \"auto\", got '8.5'");
  EXPECT_EQ(parse_error(with(R"("train_batch_size": "32")")),
            "ds.json: train_batch_size expects a positive integer or \"auto\", got '\"32\"'");
  EXPECT_EQ(parse_error(with(R"("gradient_accumulation_steps": 0)")),
            "ds.json: gradient_accumulation_steps expects a positive integer or \"auto\", got '0'");
  EXPECT_EQ(parse_error(with(R"("train_batch_size": -4)")),
            "ds.json: train_batch_size expects a positive integer or \"auto\", got '-4'");
  EXPECT_EQ(parse_error(with(R"("train_batch_size": true)")),
            "ds.json: train_batch_size expects a positive integer or \"auto\", got 'true'");
  // An integral float is an integer, as in DeepSpeed.
  EXPECT_EQ(
      parse_deepspeed_config(with(R"("train_batch_size": 32.0)"), "ds.json").train_batch_size.value,
      32);
}

TEST(DeepSpeedConfigParse, SizesAcceptIntegralFloatsOnly) {
  const DeepSpeedConfig config = parse_deepspeed_config(
      zero_with(R"("reduce_bucket_size": 5e7, "allgather_bucket_size": 300000000)"), "ds.json");
  EXPECT_EQ(config.zero_optimization.reduce_bucket_size.value, 50000000);
  EXPECT_EQ(config.zero_optimization.allgather_bucket_size, 300000000);
  EXPECT_EQ(
      parse_error(zero_with(R"("allgather_bucket_size": 2.5)")),
      "ds.json: zero_optimization.allgather_bucket_size expects a non-negative integer, got '2.5'");
  EXPECT_EQ(parse_error(zero_with(R"("reduce_bucket_size": 1e30)")),
            "ds.json: zero_optimization.reduce_bucket_size expects a non-negative integer or "
            "\"auto\", got "
            "'1e+30'");
  EXPECT_EQ(parse_error(zero_with(R"("overlap_comm": 1)")),
            "ds.json: zero_optimization.overlap_comm expects true or false, got '1'");
}

TEST(DeepSpeedConfigParse, AutoIsRefusedWhereAccelerateCannotFillIt) {
  const std::string why = " cannot be \"auto\" (Accelerate has no value to fill it with); write ";
  EXPECT_EQ(parse_error(zero_with(R"("allgather_bucket_size": "auto")")),
            "ds.json: zero_optimization.allgather_bucket_size" + why + "a non-negative integer");
  EXPECT_EQ(parse_error(zero_with(R"("stage": 3, "sub_group_size": "auto")")),
            "ds.json: zero_optimization.sub_group_size" + why + "a non-negative integer");
  EXPECT_EQ(parse_error(with(R"("fp16": {"loss_scale": "auto"})")),
            "ds.json: fp16.loss_scale" + why + "a non-negative number");
  EXPECT_EQ(parse_error(with(R"("optimizer": {"type": "SGD", "params": {"momentum": "auto"}})")),
            "ds.json: optimizer.params.momentum" + why +
                "a number, true, false, a word or a list of numbers");
  EXPECT_EQ(
      parse_error(with(R"("scheduler": {"type": "WarmupLR", "params": {"warmup_type": "auto"}})")),
      "ds.json: scheduler.params.warmup_type" + why +
          "a number, true, false, a word or a list of numbers");
  EXPECT_EQ(parse_error(zero_with(R"("overlap_comm": "auto")")),
            "ds.json: zero_optimization.overlap_comm" + why + "true or false");
}

TEST(DeepSpeedConfigParse, Fp16SettingsAndTheirRanges) {
  const DeepSpeedConfig config = parse_deepspeed_config(
      with(
          R"("fp16": {"enabled": "auto", "auto_cast": true, "loss_scale": 128, "consecutive_hysteresis": true},
              "bf16": {"enabled": false})"),
      "ds.json");
  EXPECT_TRUE(config.fp16.enabled.is_auto());
  EXPECT_EQ(config.fp16.auto_cast, std::optional<bool>(true));
  EXPECT_EQ(config.fp16.loss_scaling.loss_scale, 128);
  EXPECT_TRUE(config.fp16.loss_scaling.consecutive_hysteresis);
  EXPECT_EQ(config.fp16.loss_scaling.loss_scale_window, 1000);  // DeepSpeed's default
  EXPECT_TRUE(config.bf16.present && config.bf16.enabled.has_value() && !config.bf16.enabled.value);
  EXPECT_EQ(parse_error(with(R"("fp16": {"loss_scale_window": 0})")),
            "ds.json: fp16.loss_scale_window expects a positive integer, got '0'");
  EXPECT_EQ(parse_error(with(R"("fp16": {"loss_scale": -1})")),
            "ds.json: fp16.loss_scale expects a non-negative number, got '-1'");
  EXPECT_EQ(parse_error(with(R"("fp16": {"enabled": "yes"})")),
            "ds.json: fp16.enabled expects true, false or \"auto\", got '\"yes\"'");
  EXPECT_EQ(parse_error(with(R"("bf16": true)")), "ds.json: bf16 expects an object, got 'true'");
}

TEST(DeepSpeedConfigParse, NvmeOffloadIsRefused) {
  EXPECT_EQ(parse_error(zero_with(
                R"("stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme"})")),
            "ds.json: zero_optimization.offload_optimizer.device \"nvme\" is not supported by "
            "accelerate-cpp "
            "(use \"cpu\" or \"none\")");
  EXPECT_EQ(
      parse_error(zero_with(R"("stage": 3, "offload_param": {"device": "nvme"})")),
      "ds.json: zero_optimization.offload_param.device \"nvme\" is not supported by accelerate-cpp "
      "(use \"cpu\" or \"none\")");
  EXPECT_EQ(
      parse_error(zero_with(R"("offload_param": {"device": "gpu"})")),
      "ds.json: zero_optimization.offload_param.device expects \"none\", \"cpu\" or \"auto\", got "
      "'\"gpu\"'");
  const DeepSpeedConfig config = parse_deepspeed_config(
      zero_with(R"("offload_optimizer": {"device": "auto", "pin_memory": false, "nvme_path": null},
                   "offload_param": null)"),
      "ds.json");
  EXPECT_TRUE(config.zero_optimization.offload_optimizer.device.is_auto());
  EXPECT_FALSE(config.zero_optimization.offload_optimizer.pin_memory);
  EXPECT_TRUE(config.zero_optimization.offload_param.device.absent());
  EXPECT_THAT(config.ignored_keys, IsEmpty());  // nvme_path without nvme means nothing
}

TEST(DeepSpeedConfigParse, AutoTpSizeIsReadAndTheSectionsOtherKeysListed) {
  const DeepSpeedConfig config = parse_deepspeed_config(
      with(R"("tensor_parallel": {"autotp_size": 2, "tp_overlap_comm": true})"), "ds.json");
  EXPECT_EQ(config.autotp_size, 2);
  EXPECT_THAT(config.ignored_keys, ElementsAre("tensor_parallel.tp_overlap_comm"));
  EXPECT_EQ(parse_deepspeed_config(with(""), "ds.json").autotp_size, 0);
}

TEST(DeepSpeedConfigParse, SectionsWeCannotHonourAreRefused) {
  EXPECT_EQ(
      parse_error(with(R"("pipeline": {"stages": 2})")),
      "ds.json: pipeline (pipeline parallelism) is not supported by accelerate-cpp; remove it");
  EXPECT_EQ(
      parse_error(with(R"("sparse_attention": {"mode": "fixed"})")),
      "ds.json: sparse_attention (sparse attention) is not supported by accelerate-cpp; remove it");
  EXPECT_EQ(parse_error(with(R"("tensor_parallel": {"autotp_size": -2})")),
            "ds.json: tensor_parallel.autotp_size expects a non-negative integer, got '-2'");
  EXPECT_EQ(parse_error(with(R"("fp8": {"enabled": true})")),
            "ds.json: fp8 (fp8 training) is not supported by accelerate-cpp; remove it");
  // Written out but switched off: accepted, and not listed.
  const DeepSpeedConfig config = parse_deepspeed_config(
      with(R"("amp": {"enabled": false}, "curriculum_learning": {"enabled": false})"), "ds.json");
  EXPECT_THAT(config.ignored_keys, IsEmpty());
}

TEST(DeepSpeedConfigParse, UnknownKeysAreListedOnceWithTheirPaths) {
  const DeepSpeedConfig config = parse_deepspeed_config(
      R"({"zero_optimization": {"stage": 2, "elastic_checkpoint": false,
                                "offload_optimizer": {"device": "cpu", "buffer_count": 4}},
          "activation_checkpointing": {"partition_activations": true, "cpu_checkpointing": true},
          "bf16": {"enabled": false, "immediate_grad_update": true},
          "optimizer": {"type": "Adam", "legacy_fusion": false, "params": {"lr": 0.001}},
          "bfloat16": {"enabled": true},
          "steps_per_print": 10, "wall_clock_breakdown": true, "tensorboard": {"enabled": true},
          "prescale_gradients": false})",
      "ds.json");
  EXPECT_THAT(config.ignored_keys,
              ElementsAre("activation_checkpointing", "bf16.immediate_grad_update", "bfloat16",
                          "optimizer.legacy_fusion", "prescale_gradients",
                          "zero_optimization.elastic_checkpoint",
                          "zero_optimization.offload_optimizer.buffer_count"));
}

TEST(DeepSpeedConfigParse, CommunicationDataTypeAsDeepSpeedReadsIt) {
  const auto read = [](const std::string& value) {
    return parse_deepspeed_config(with(R"("communication_data_type": )" + value), "ds.json")
        .communication_data_type;
  };
  EXPECT_EQ(read(R"("bf16")"), CollectiveDtype::kBf16);
  EXPECT_EQ(read(R"("FP16")"), CollectiveDtype::kFp16);  // DeepSpeed lower-cases it
  EXPECT_EQ(read(R"("fp32")"), CollectiveDtype::kFp32);
  EXPECT_EQ(read("null"), std::nullopt);  // null: as absent, the gradients' own dtype
  EXPECT_EQ(parse_deepspeed_config(with(""), "ds.json").communication_data_type, std::nullopt);
  EXPECT_THAT(
      parse_deepspeed_config(with(R"("communication_data_type": "bf16")"), "ds.json").ignored_keys,
      IsEmpty());
  for (const char* bad : {R"("int8")", "16", R"("auto")"}) {
    const std::string error =
        parse_error(with(std::string(R"("communication_data_type": )") + bad));
    EXPECT_THAT(error, HasSubstr("ds.json: communication_data_type")) << bad;
    EXPECT_THAT(error, HasSubstr("\"fp32\", \"fp16\" or \"bf16\"")) << bad;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

TEST(DeepSpeedConfigParse, OptimizerAndSchedulerParams) {
  const DeepSpeedConfig config = parse_deepspeed_config(
      with(
          R"("optimizer": {"type": "Adam", "params": {"lr": 0.001, "betas": [0.9, 0.95], "eps": "auto"}},
              "scheduler": {"type": "WarmupLR", "params": {"warmup_type": "log", "warmup_num_steps": 100}})"),
      "ds.json");
  EXPECT_EQ(std::get<double>(config.optimizer->params.at("lr").value), 0.001);
  EXPECT_EQ(std::get<std::vector<double>>(config.optimizer->params.at("betas").value),
            (std::vector<double>{0.9, 0.95}));
  EXPECT_TRUE(config.optimizer->params.at("eps").is_auto());
  EXPECT_EQ(std::get<std::string>(config.scheduler->params.at("warmup_type").value), "log");
  EXPECT_EQ(std::get<double>(config.scheduler->params.at("warmup_num_steps").value), 100);
  EXPECT_EQ(parse_error(with(R"("optimizer": {"params": {"lr": 0.1}})")),
            "ds.json: optimizer.type is missing");
  EXPECT_EQ(parse_error(with(R"("optimizer": {"type": "Adam", "params": {"betas": [0.9, "x"]}})")),
            "ds.json: optimizer.params.betas expects a number, true, false, a word or a list of "
            "numbers, got "
            "'[0.9,\"x\"]'");
}

TEST(DeepSpeedConfigYaml, KeysThatTheFileReplacesAreRefusedBesideIt) {
  const auto error_of = [](const std::vector<std::string>& keys) -> std::string {
    try {
      check_keys_beside_config_file(keys, "default_config.yaml", "zero2.json");
    } catch (const ConfigError& error) {
      return error.what();
    }
    return "(no error)";
  };
  // What `accelerate config` writes beside a file: allowed.
  EXPECT_EQ(error_of({"deepspeed_config_file", "zero3_init_flag", "deepspeed_multinode_launcher"}),
            "(no error)");
  EXPECT_EQ(error_of({"deepspeed_config_file", "zero_stage"}),
            "default_config.yaml: zero_stage is set together with deepspeed_config_file "
            "(zero2.json), which "
            "replaces it: remove it from the accelerate config and set it in zero2.json");
  EXPECT_EQ(error_of({"gradient_clipping", "deepspeed_config_file", "offload_param_device",
                      "mixed_precision"}),
            "default_config.yaml: gradient_clipping, offload_param_device and mixed_precision are "
            "set together "
            "with deepspeed_config_file (zero2.json), which replaces them: remove them from the "
            "accelerate "
            "config and set them in zero2.json");
  // Accelerate's list, every key of which is refused.
  EXPECT_EQ(keys_replaced_by_config_file().size(), 9u);
  for (const std::string& key : keys_replaced_by_config_file()) {
    EXPECT_THAT(error_of({key}), HasSubstr("default_config.yaml: " + key + " is set together"))
        << key;
  }
}

}  // namespace
}  // namespace accelerate::sharding
