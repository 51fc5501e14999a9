// Writing config files: Accelerate's YAML style, `config default`'s content,
// `config update`'s rewrite, and the questionnaire over typed lines.
#include <gtest/gtest.h>

#include <sstream>

#include "accelerate/common/errors.h"
#include "config/config_file.h"
#include "config/config_files.h"
#include "config/config_yaml.h"
#include "config/questionnaire.h"

namespace accelerate::config {
namespace {

TEST(ConfigYaml, QuotesOnlyStringsYamlWouldReadAsSomethingElse) {
  YAML::Node root(YAML::NodeType::Map);
  root["b"] = string_node("no");
  root["a"] = string_node("NO");
  root["c"] = string_node("0");
  root["d"] = string_node("0,1");
  root["e"] = string_node("it's: odd");
  root["f"] = 3;
  root["g"] = true;
  root["h"] = YAML::Node(YAML::NodeType::Sequence);
  root["i"] = YAML::Node(YAML::NodeType::Map);
  root["j"]["z"] = 1;
  root["j"]["y"] = string_node("on");
  root["k"].push_back(string_node("A=1"));
  root["k"].push_back(string_node("yes"));
  EXPECT_EQ(to_config_yaml(root),
            "a: 'NO'\nb: 'no'\nc: '0'\nd: 0,1\ne: 'it''s: odd'\nf: 3\ng: true\nh: []\ni: {}\n"
            "j:\n  y: 'on'\n  z: 1\nk:\n- A=1\n- 'yes'\n");
}

TEST(ConfigYaml, JsonIsWhatJsonDumpsWritesWithIndentTwoAndSortedKeys) {
  YAML::Node root(YAML::NodeType::Map);
  root["num_processes"] = 2;
  root["distributed_type"] = string_node("NO");
  root["gpu_ids"] = string_node("0");
  root["use_cpu"] = false;
  root["tpu_env"] = YAML::Node(YAML::NodeType::Sequence);
  root["mpirun_config"]["mpirun_hostfile"] = string_node("/h \"x\"");
  EXPECT_EQ(to_config_json(root),
            "{\n  \"distributed_type\": \"NO\",\n  \"gpu_ids\": \"0\",\n  \"mpirun_config\": {\n"
            "    \"mpirun_hostfile\": \"/h \\\"x\\\"\"\n  },\n  \"num_processes\": 2,\n  "
            "\"tpu_env\": [],\n"
            "  \"use_cpu\": false\n}\n");
  // And it loads here as well (JSON is YAML).
  EXPECT_EQ(parse_config_text(to_config_json(root), "c.json").find("distributed_type")->text, "NO");
}

TEST(ConfigYaml, WrittenTextLoadsBackToTheSameValues) {
  ClusterAnswers answers;
  answers.distributed_type = "MULTI_GPU";
  answers.num_processes = 8;
  answers.gpu_ids = "0";
  answers.mixed_precision = "no";
  ConfigFile file = parse_config_text(to_config_yaml(to_config_node(answers)), "x");
  EXPECT_EQ(file.find("distributed_type")->text, "MULTI_GPU");
  EXPECT_EQ(file.find("gpu_ids")->text, "0");
  EXPECT_EQ(file.find("mixed_precision")->text, "no");
  EXPECT_EQ(file.find("num_processes")->text, "8");
}

TEST(ConfigDefault, MatchesAcceleratesBasicConfigPerGpuCount) {
  const std::string cpu_only = to_config_yaml(default_config_node("bf16", 0));
  EXPECT_NE(cpu_only.find("distributed_type: 'NO'\n"), std::string::npos);
  EXPECT_NE(cpu_only.find("use_cpu: true\n"), std::string::npos);
  EXPECT_NE(cpu_only.find("mixed_precision: bf16\n"), std::string::npos);
  EXPECT_NE(cpu_only.find("num_processes: 1\n"), std::string::npos);
  const std::string four = to_config_yaml(default_config_node("no", 4));
  EXPECT_NE(four.find("distributed_type: MULTI_GPU\n"), std::string::npos);
  EXPECT_NE(four.find("num_processes: 4\n"), std::string::npos);
  EXPECT_NE(four.find("use_cpu: false\n"), std::string::npos);
  EXPECT_NE(to_config_yaml(default_config_node("no", 1)).find("use_cpu: false\n"),
            std::string::npos);
}

TEST(ConfigUpdate, OldFileGetsCurrentKeysAndKeepsItsValues) {
  const std::string old_file =
      "compute_environment: LOCAL_MACHINE\n"
      "deepspeed_config: {}\n"
      "distributed_type: MULTI_GPU\n"
      "fp16: true\n"
      "gpu_ids: 0,1\n"
      "main_process_ip: null\n"
      "num_machines: 1\n"
      "num_processes: 2\n"
      "fsdp_config:\n"
      "  fsdp_sharding_strategy: FULL_SHARD\n";
  EXPECT_EQ(to_config_yaml(updated_config_node(old_file, "old.yaml")),
            "compute_environment: LOCAL_MACHINE\n"
            "debug: false\n"
            "distributed_type: MULTI_GPU\n"
            "downcast_bf16: 'no'\n"
            "enable_cpu_affinity: false\n"
            "fsdp_config:\n"
            "  fsdp_sharding_strategy: FULL_SHARD\n"
            "gpu_ids: 0,1\n"
            "machine_rank: 0\n"
            "main_training_function: main\n"
            "mixed_precision: fp16\n"
            "num_machines: 1\n"
            "num_processes: 2\n"
            "rdzv_backend: static\n"
            "tpu_env: []\n"
            "tpu_use_cluster: false\n"
            "tpu_use_sudo: false\n"
            "use_cpu: false\n");
}

TEST(ConfigUpdate, NormalisesSpellingsAndTranslatesDynamoBackend) {
  const std::string text = to_config_yaml(updated_config_node(
      "distributed_type: NO\nuse_cpu: yes\ndynamo_backend: INDUCTOR\nmixed_precision: BF16\n",
      "f"));
  EXPECT_NE(text.find("distributed_type: 'NO'\n"), std::string::npos) << text;
  EXPECT_NE(text.find("use_cpu: true\n"), std::string::npos) << text;
  EXPECT_NE(text.find("dynamo_config:\n  dynamo_backend: INDUCTOR\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mixed_precision: bf16\n"), std::string::npos) << text;
  EXPECT_NE(text.find("num_processes: 1\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("dynamo_backend: INDUCTOR\nd"), std::string::npos);
}

TEST(ConfigUpdate, AnUpdatedFileIsAlreadyCurrent) {
  const std::string once =
      to_config_yaml(updated_config_node("distributed_type: MULTI_CPU\nnum_processes: 3\n", "f"));
  EXPECT_NE(once.find("distributed_type: MULTI_CPU\n"), std::string::npos);
  EXPECT_EQ(to_config_yaml(updated_config_node(once, "f")), once);
}

TEST(ConfigUpdate, RefusesAFileThatDoesNotLoad) {
  EXPECT_THROW(updated_config_node("num_processes: 2\nbogus: 1\n", "f"), ConfigFileError);
}

// The questionnaire over typed lines, as a pipe would drive it.
ClusterAnswers answer(const std::string& lines, std::string* transcript = nullptr) {
  std::istringstream in(lines);
  std::ostringstream out;
  auto prompter = make_line_prompter(in, out);
  ClusterAnswers answers = ask_cluster_questions(*prompter, "/home/u");
  if (transcript != nullptr) *transcript = out.str();
  return answers;
}

TEST(Questionnaire, AllDefaultsMeanOneProcessNoPrecision) {
  // compute environment, machine type, CPU only?, DeepSpeed?, GPU ids, mixed precision
  ClusterAnswers a = answer("\n\n\n\n\n\n");
  EXPECT_EQ(a.distributed_type, "NO");
  EXPECT_FALSE(a.use_cpu);
  EXPECT_EQ(a.num_processes, 1);
  EXPECT_EQ(a.gpu_ids, "all");
  EXPECT_EQ(a.mixed_precision, "no");
  EXPECT_FALSE(a.deepspeed.has_value());
  EXPECT_FALSE(a.fsdp.has_value());
}

TEST(Questionnaire, MultiNodeGpuAnswers) {
  std::string transcript;
  ClusterAnswers a =
      answer("0\nmulti-GPU\n2\n1\n10.0.0.5\n1234\nno\nyes\nno\nno\n8\n0, 1\nbf16\n", &transcript);
  EXPECT_EQ(a.distributed_type, "MULTI_GPU");
  EXPECT_EQ(a.num_machines, 2);
  EXPECT_EQ(a.machine_rank, 1);
  EXPECT_EQ(a.main_process_ip, "10.0.0.5");
  EXPECT_EQ(a.main_process_port, 1234);
  EXPECT_FALSE(a.same_network);
  EXPECT_EQ(a.rdzv_backend, "static");  // the only one we have; said, not asked
  EXPECT_TRUE(a.debug);
  EXPECT_EQ(a.num_processes, 8);
  EXPECT_EQ(a.gpu_ids, "0,1");
  EXPECT_EQ(a.mixed_precision, "bf16");
  EXPECT_NE(transcript.find("What is the rank of this machine?\n  [0] 0\n  [1] 1\n"),
            std::string::npos);
  EXPECT_NE(transcript.find("static rendezvous"), std::string::npos);
}

TEST(Questionnaire, MultiCpuWithMpirunExpandsTheHostfile) {
  ClusterAnswers a = answer("0\n1\n1\nno\nyes\n\n4\n0\n");
  EXPECT_EQ(a.distributed_type, "MULTI_CPU");
  EXPECT_TRUE(a.use_cpu);
  EXPECT_EQ(a.mpirun_hostfile, "/home/u/hostfile");
  EXPECT_EQ(a.num_processes, 4);
  EXPECT_FALSE(a.gpu_ids.has_value());  // not asked on the CPU
}

TEST(Questionnaire, BadAnswersAreAskedAgain) {
  std::string transcript;
  // SageMaker, then a number out of range, then "maybe" for a yes/no, then
  // no DeepSpeed and no FSDP, then one GPU for multi-GPU on one machine,
  // then a bad GPU list.
  ClusterAnswers a = answer("1\n0\n7\n2\n\nmaybe\nno\nno\nno\n1\n2\n0;1\n0,1\n\n", &transcript);
  EXPECT_EQ(a.distributed_type, "MULTI_GPU");
  EXPECT_EQ(a.num_processes, 2);
  EXPECT_EQ(a.gpu_ids, "0,1");
  EXPECT_NE(transcript.find("Amazon SageMaker is not supported"), std::string::npos);
  EXPECT_NE(transcript.find("Please enter a number from 0 to 2."), std::string::npos);
  EXPECT_NE(transcript.find("Please enter yes or no."), std::string::npos);
  EXPECT_NE(transcript.find("needs at least 2 GPUs"), std::string::npos);
  EXPECT_NE(transcript.find("Please enter 'all' or GPU ids"), std::string::npos);
}

TEST(Questionnaire, DeepSpeedAnswersWriteAcceleratesSection) {
  std::string transcript;
  // One machine, not CPU only, DeepSpeed without a JSON file: stage 3, nvme
  // refused and asked again; 4 accumulation steps, clipping 0.5, 16-bit
  // save yes, zero.Init no, 2 GPUs (GPU ids are not asked with DeepSpeed), bf16.
  ClusterAnswers a =
      answer("\n\nno\nyes\nno\n3\nnvme\ncpu\n\n4\nyes\n0.5\nyes\nno\n2\nbf16\n", &transcript);
  EXPECT_EQ(a.distributed_type, "DEEPSPEED");
  ASSERT_TRUE(a.deepspeed.has_value());
  EXPECT_EQ(a.deepspeed->zero_stage, 3);
  EXPECT_EQ(a.num_processes, 2);
  EXPECT_FALSE(a.gpu_ids.has_value());
  EXPECT_NE(transcript.find("Do you want to use DeepSpeed? [yes/NO]: "), std::string::npos);
  EXPECT_NE(transcript.find("What should be your DeepSpeed's ZeRO optimization stage?"),
            std::string::npos);
  EXPECT_NE(transcript.find("Do you want to save 16-bit model weights when using ZeRO Stage-3? "
                            "[yes/NO]: "),
            std::string::npos);
  EXPECT_NE(transcript.find("Do you want to enable `deepspeed.zero.Init` when using ZeRO Stage-3 "
                            "for constructing massive models? [yes/NO]: "),
            std::string::npos);
  EXPECT_NE(
      transcript.find("NVMe offloading is not supported by accelerate-cpp; choose none or cpu."),
      std::string::npos);
  EXPECT_NE(
      transcript.find("How many gradient accumulation steps you're passing in your script? [1]: "),
      std::string::npos);
  EXPECT_EQ(to_config_yaml(to_config_node(a)),
            "compute_environment: LOCAL_MACHINE\n"
            "debug: false\n"
            "deepspeed_config:\n"
            "  gradient_accumulation_steps: 4\n"
            "  gradient_clipping: 0.5\n"
            "  offload_optimizer_device: cpu\n"
            "  offload_param_device: none\n"
            "  zero3_init_flag: false\n"
            "  zero3_save_16bit_model: true\n"
            "  zero_stage: 3\n"
            "distributed_type: DEEPSPEED\n"
            "downcast_bf16: 'no'\n"
            "enable_cpu_affinity: false\n"
            "machine_rank: 0\n"
            "main_training_function: main\n"
            "mixed_precision: bf16\n"
            "num_machines: 1\n"
            "num_processes: 2\n"
            "rdzv_backend: static\n"
            "same_network: true\n"
            "tpu_env: []\n"
            "tpu_use_cluster: false\n"
            "tpu_use_sudo: false\n"
            "use_cpu: false\n");
}

TEST(Questionnaire, DeepSpeedWithAJsonFileAsksNoMore) {
  // Multi-GPU on two machines: the DeepSpeed keys come from the file, the
  // file's fp16/bf16 replace mixed precision, and the launcher is "standard".
  // zero.Init is asked with a file too (yes here), as in Accelerate.
  ClusterAnswers a = answer("0\n2\n2\n0\n10.0.0.1\n\n\nno\nyes\nyes\n/cfg/zero2.json\nyes\n4\n");
  EXPECT_EQ(a.distributed_type, "DEEPSPEED");
  const std::string text = to_config_yaml(to_config_node(a));
  EXPECT_NE(text.find("deepspeed_config:\n  deepspeed_config_file: /cfg/zero2.json\n"
                      "  deepspeed_multinode_launcher: standard\n  zero3_init_flag: true\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("mixed_precision"), std::string::npos) << text;
  EXPECT_EQ(text.find("zero_stage"), std::string::npos) << text;
  // And it loads back, with DeepSpeed keys beside the file refused only when set.
  EXPECT_EQ(parse_config_text(text, "x").find("distributed_type")->text, "DEEPSPEED");
}

TEST(Questionnaire, FsdpAsksAcceleratesQuestions) {
  std::string transcript;
  // FSDP 1 (menu entry 0): FULL_SHARD (Accelerate's default answer),
  // offloading, its wrap policy
  // (entry 0, TRANSFORMER_BASED_WRAP) and the class names (an empty answer
  // and one without a name are asked again), FULL_STATE_DICT (entry 0), no
  // CPU RAM efficient loading, and then no module-state broadcast (FSDP 1).
  ClusterAnswers v1 =
      answer("0\n2\n1\nno\nno\nyes\n0\n\nyes\n0\n\n, ,\nBlock,Mlp\n0\nno\nno\n2\n\n", &transcript);
  EXPECT_EQ(v1.distributed_type, "FSDP");
  ASSERT_TRUE(v1.fsdp.has_value());
  EXPECT_EQ(v1.fsdp->version, 1);
  EXPECT_EQ(v1.fsdp->reshard_after_forward, "FULL_SHARD");
  EXPECT_EQ(v1.fsdp->auto_wrap_policy, "TRANSFORMER_BASED_WRAP");
  EXPECT_EQ(v1.fsdp->transformer_layer_cls_to_wrap, "Block,Mlp");
  EXPECT_FALSE(v1.fsdp->min_num_params.has_value());
  EXPECT_NE(transcript.find(
                "What should be your sharding strategy?\n  [0] FULL_SHARD\n  [1] SHARD_GRAD_OP\n"),
            std::string::npos)
      << transcript;
  // Every strategy runs, the hybrid ones too.
  EXPECT_NE(transcript.find("  [3] HYBRID_SHARD\n  [4] HYBRID_SHARD_ZERO2\n"), std::string::npos)
      << transcript;
  EXPECT_NE(transcript.find("What should be your auto wrap policy?\n  [0] TRANSFORMER_BASED_WRAP\n"
                            "  [1] SIZE_BASED_WRAP\n  [2] NO_WRAP\n"),
            std::string::npos)
      << transcript;
  EXPECT_NE(transcript.find("Specify the comma-separated list of transformer layer class names "
                            "(case-sensitive) to wrap ,e.g, :`BertLayer`, `GPTJBlock`, `T5Block`, "
                            "`BertLayer,BertEmbeddings,BertSelfOutput` ...? : "),
            std::string::npos)
      << transcript;
  EXPECT_NE(transcript.find("Please enter a value."), std::string::npos) << transcript;
  EXPECT_NE(transcript.find("Please enter one class name or more, separated by commas."),
            std::string::npos)
      << transcript;
  EXPECT_NE(transcript.find("Do you want to offload parameters and gradients to CPU? [yes/NO]: "
                            "yes\n"),
            std::string::npos)
      << transcript;
  EXPECT_TRUE(v1.fsdp->offload_params);
  EXPECT_NE(transcript.find("What should be your FSDP's state dict type?\n  [0] FULL_STATE_DICT\n"
                            "  [1] LOCAL_STATE_DICT\n  [2] SHARDED_STATE_DICT\n"),
            std::string::npos)
      << transcript;
  EXPECT_NE(transcript.find("Do you want each individually wrapped FSDP unit to broadcast module "
                            "parameters from rank 0 at the start? [YES/no]: "),
            std::string::npos)
      << transcript;
  const std::string v1_text = to_config_yaml(to_config_node(v1));
  EXPECT_NE(v1_text.find("fsdp_config:\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
                         "  fsdp_cpu_ram_efficient_loading: false\n"
                         "  fsdp_offload_params: true\n"
                         "  fsdp_reshard_after_forward: FULL_SHARD\n"
                         "  fsdp_state_dict_type: FULL_STATE_DICT\n"
                         "  fsdp_sync_module_states: false\n"
                         "  fsdp_transformer_layer_cls_to_wrap: Block,Mlp\n  fsdp_version: 1\n"),
            std::string::npos)
      << v1_text;
  // The file loads back with the keys in use.
  const ConfigFile loaded = parse_config_text(v1_text, "x");
  const ConfigValue* classes = loaded.find("fsdp_config.fsdp_transformer_layer_cls_to_wrap");
  ASSERT_NE(classes, nullptr);
  EXPECT_EQ(classes->text, "Block,Mlp");

  // FSDP 2 (the default version), resharding after forward (the default,
  // FULL_SHARD), SIZE_BASED_WRAP with Accelerate's default minimum.
  ClusterAnswers v2 = answer("0\n2\n1\nno\nno\nyes\n\n\n\n1\n\n\n\n2\n\n", &transcript);
  EXPECT_EQ(v2.fsdp->version, 2);
  EXPECT_NE(transcript.find("Do you want to enable resharding after forward? [YES/no]: "),
            std::string::npos)
      << transcript;
  EXPECT_NE(transcript.find("What should be your FSDP's minimum number of parameters for Default "
                            "Auto Wrapping Policy? [1e8]: "),
            std::string::npos)
      << transcript;
  EXPECT_NE(to_config_yaml(to_config_node(v2))
                .find("fsdp_config:\n  fsdp_auto_wrap_policy: SIZE_BASED_WRAP\n"
                      "  fsdp_cpu_ram_efficient_loading: true\n"
                      "  fsdp_min_num_params: 100000000\n  fsdp_offload_params: false\n"
                      "  fsdp_reshard_after_forward: true\n"
                      "  fsdp_state_dict_type: SHARDED_STATE_DICT\n"
                      "  fsdp_sync_module_states: true\n  fsdp_version: 2\n"),
            std::string::npos)
      << to_config_yaml(to_config_node(v2));

  // Without resharding (SHARD_GRAD_OP, stage 2) there are no units to ask about.
  ClusterAnswers kept = answer("0\n2\n1\nno\nno\nyes\n\nno\n\n\n\n2\n\n", &transcript);
  EXPECT_EQ(transcript.find("auto wrap policy"), std::string::npos) << transcript;
  EXPECT_EQ(transcript.find("broadcast module parameters"), std::string::npos)
      << "FSDP 2 does not ask it: " << transcript;
  EXPECT_NE(to_config_yaml(to_config_node(kept))
                .find("fsdp_config:\n  fsdp_cpu_ram_efficient_loading: true\n"
                      "  fsdp_offload_params: false\n  fsdp_reshard_after_forward: false\n"
                      "  fsdp_state_dict_type: SHARDED_STATE_DICT\n"
                      "  fsdp_sync_module_states: true\n  fsdp_version: 2\n"),
            std::string::npos)
      << to_config_yaml(to_config_node(kept));
}

TEST(ConfigUpdate, NoMixedPrecisionIsAddedBesideADeepSpeedConfigFile) {
  const std::string text = to_config_yaml(updated_config_node(
      "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n", "f"));
  EXPECT_EQ(text.find("mixed_precision"), std::string::npos) << text;
  const std::string plain = to_config_yaml(updated_config_node(
      "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 1\n", "f"));
  EXPECT_NE(plain.find("mixed_precision: 'no'\n"), std::string::npos) << plain;
}

TEST(ConfigYaml, FloatsAreWrittenAsPyYamlWritesThem) {
  YAML::Node root(YAML::NodeType::Map);
  root["a"] = float_node(1.0);
  root["b"] = float_node(0.5);
  root["c"] = float_node(1e-05);
  root["d"] = float_node(1e16);
  EXPECT_EQ(to_config_yaml(root), "a: 1.0\nb: 0.5\nc: 1.0e-05\nd: 1.0e+16\n");
}

TEST(Questionnaire, EndOfInputIsAClearError) {
  try {
    answer("0\n2\n");
    FAIL() << "expected an error";
  } catch (const ConfigError& error) {
    EXPECT_NE(
        std::string(error.what())
            .find("stdin ended before this question was answered: How many different machines"),
        std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace accelerate::config
