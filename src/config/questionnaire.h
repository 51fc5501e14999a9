// `accelerate config`: the questions Hugging Face Accelerate asks, in its
// order, limited to what accelerate-cpp runs (one machine or several; no
// distributed training, multi-CPU or multi-GPU; ZeRO through DeepSpeed's or
// FSDP's questions), and the file they produce.
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>

#include "config/prompter.h"

namespace accelerate::config {

// deepspeed_config, as Accelerate's questions fill it.
struct DeepSpeedAnswers {
  // deepspeed_config_file ("none": no file); the keys below are not asked then.
  std::optional<std::string> config_file;
  int zero_stage = 2;                                   // 0-3
  std::optional<std::string> offload_optimizer_device;  // none | cpu; asked from stage 2 on
  std::optional<std::string> offload_param_device;
  int gradient_accumulation_steps = 1;
  std::optional<double> gradient_clipping;
  std::optional<bool> zero3_save_16bit_model;  // asked at stage 3 only
  bool zero3_init_flag = false;                // asked with or without a file, as Accelerate does
};

// fsdp_config, as Accelerate's questions fill it.
struct FsdpAnswers {
  int version = 2;
  // FSDP 1: a sharding strategy's name; FSDP 2: "true" or "false".
  std::string reshard_after_forward = "true";
  // Asked for FULL_SHARD (ZeRO stage 3) only, where they pick the units:
  // TRANSFORMER_BASED_WRAP with its class names, SIZE_BASED_WRAP with its
  // minimum, or NO_WRAP.
  std::optional<std::string> auto_wrap_policy;
  std::optional<std::string> transformer_layer_cls_to_wrap;  // "Block,Mlp"
  std::optional<int> min_num_params;
  bool offload_params = false;
  std::string state_dict_type = "SHARDED_STATE_DICT";
  bool cpu_ram_efficient_loading = true;
  bool sync_module_states = true;  // asked for FSDP 1 without cpu_ram_efficient_loading
};

// The answers, with Accelerate's defaults.
struct ClusterAnswers {
  std::string distributed_type = "NO";  // NO | MULTI_CPU | MULTI_GPU | DEEPSPEED | FSDP
  int num_machines = 1;
  int machine_rank = 0;
  std::optional<std::string> main_process_ip;
  std::optional<int> main_process_port;
  bool same_network = true;
  std::string rdzv_backend = "static";
  bool debug = false;
  bool use_cpu = false;
  std::optional<std::string> mpirun_hostfile;
  int num_processes = 1;
  std::optional<std::string> gpu_ids;
  std::string mixed_precision =
      "no";  // no | fp16 | bf16 (not written beside a DeepSpeed config file)
  std::optional<DeepSpeedAnswers> deepspeed;  // distributed_type DEEPSPEED
  std::optional<FsdpAnswers> fsdp;            // distributed_type FSDP
};

// Asks every question through `prompter`. `home` expands "~/" in paths.
ClusterAnswers ask_cluster_questions(Prompter& prompter, const std::string& home);

// The file's content, with the keys current Accelerate writes (unused
// features set to "off", so Accelerate reads it without complaint).
YAML::Node to_config_node(const ClusterAnswers& answers);

}  // namespace accelerate::config
