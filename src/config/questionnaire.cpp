#include "config/questionnaire.h"

#include <algorithm>
#include <cctype>
#include <functional>

#include "accelerate/common/errors.h"
#include "accelerate/common/mixed_precision.h"
#include "common/environment_text.h"
#include "common/settings.h"
#include "config/config_yaml.h"
#include "sharding/plugin_from_environment.h"

namespace accelerate::config {
namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return text;
}

// Re-asks until the answer is valid; a bad answer gets a one-line hint, as in
// Accelerate ("Please enter yes or no.").
class Asker {
 public:
  explicit Asker(Prompter& prompter) : prompter_(prompter) {}

  bool yes_no(const std::string& prompt, bool default_value) {
    for (;;) {
      const std::string answer = lower(prompter_.ask(prompt));
      if (answer.empty()) return default_value;
      if (answer == "yes" || answer == "y" || answer == "true") return true;
      if (answer == "no" || answer == "n" || answer == "false") return false;
      prompter_.say("Please enter yes or no.");
    }
  }

  int integer(const std::string& prompt, std::optional<int> default_value, int min, int max) {
    for (;;) {
      const std::string answer = prompter_.ask(prompt);
      if (answer.empty() && default_value) return *default_value;
      if (auto value = detail::parse_integer_in(answer, min, max)) return static_cast<int>(*value);
      prompter_.say("Please enter a whole number from " + std::to_string(min) + " to " +
                    std::to_string(max) + ".");
    }
  }

  std::string text(const std::string& prompt, const std::optional<std::string>& default_value) {
    for (;;) {
      const std::string answer = prompter_.ask(prompt);
      if (!answer.empty()) return answer;
      if (default_value) return *default_value;
      prompter_.say("Please enter a value.");
    }
  }

  double number(const std::string& prompt, double default_value) {
    for (;;) {
      const std::string answer = prompter_.ask(prompt);
      if (answer.empty()) return default_value;
      if (auto value = detail::parse_non_negative_number(answer)) return *value;
      prompter_.say("Please enter a number of 0 or more, such as 1.0.");
    }
  }

  // A menu whose options accelerate-cpp cannot run all: `refusal` returns
  // why an option is refused ("" when it is fine), said before asking again.
  int choose_runnable(const std::string& question, const std::vector<std::string>& options,
                      int default_index, const std::function<std::string(int)>& refusal) {
    for (;;) {
      const int index = prompter_.choose(question, options, default_index);
      const std::string why = refusal(index);
      if (why.empty()) return index;
      prompter_.say(why);
    }
  }

  std::string gpu_ids(const std::string& prompt) {
    for (;;) {
      std::string answer = text(prompt, std::string("all"));
      answer.erase(std::remove(answer.begin(), answer.end(), ' '), answer.end());
      if (lower(answer) == "all") return "all";
      bool valid = answer.front() != ',' && answer.back() != ',' &&
                   answer.find(",,") == std::string::npos &&
                   std::all_of(answer.begin(), answer.end(),
                               [](unsigned char c) { return std::isdigit(c) || c == ','; });
      if (valid) return answer;
      prompter_.say("Please enter 'all' or GPU ids separated by commas, such as 0,1.");
    }
  }

  Prompter& prompter() { return prompter_; }

 private:
  Prompter& prompter_;
};

void ask_machines(Asker& ask, ClusterAnswers& answers) {
  answers.num_machines = ask.integer(
      "How many different machines will you use (use more than 1 for multi-node training)? [1]: ",
      1, 1, 100000);
  if (answers.num_machines > 1) {
    const std::string rank_question = "What is the rank of this machine?";
    if (answers.num_machines <= 10) {
      std::vector<std::string> ranks;
      for (int i = 0; i < answers.num_machines; ++i) ranks.push_back(std::to_string(i));
      answers.machine_rank = ask.prompter().choose(rank_question, ranks, 0);
    } else {
      answers.machine_rank =
          ask.integer(rank_question + " ", std::nullopt, 0, answers.num_machines - 1);
    }
    answers.main_process_ip = ask.text(
        "What is the IP address of the machine that will host the main process? ", std::nullopt);
    answers.main_process_port = ask.integer(
        "What is the port you will use to communicate with the main process? [29500]: ", 29500, 1,
        65535);
    answers.same_network = ask.yes_no(
        "Are all the machines on the same local network? Answer `no` if nodes are on the cloud "
        "and/or on "
        "different network hosts [YES/no]: ",
        true);
    // Accelerate asks for a rendezvous backend here; accelerate-cpp has only
    // the static one, so say what it needs instead of asking.
    if (!answers.same_network) {
      ask.prompter().say(
          "accelerate-cpp uses the static rendezvous (rdzv_backend: static): every machine must "
          "reach the main process's address and port.");
    }
  }
  answers.debug = ask.yes_no(
      "Should distributed operations be checked while running for errors? This can avoid timeout "
      "issues but will "
      "be slower. [yes/NO]: ",
      false);
}

// The DeepSpeed questions Accelerate asks when no JSON file is given.
void ask_deepspeed_settings(Asker& ask, DeepSpeedAnswers& ds) {
  ds.zero_stage = ask.prompter().choose("What should be your DeepSpeed's ZeRO optimization stage?",
                                        {"0", "1", "2", "3"}, 2);
  if (ds.zero_stage >= 2) {
    const std::vector<std::string> devices = {"none", "cpu", "nvme"};
    const auto no_nvme = [](int device) -> std::string {
      return device == 2 ? "NVMe offloading is not supported by accelerate-cpp; choose none or cpu."
                         : "";
    };
    ds.offload_optimizer_device =
        devices[ask.choose_runnable("Where to offload optimizer states?", devices, 0, no_nvme)];
    ds.offload_param_device =
        devices[ask.choose_runnable("Where to offload parameters?", devices, 0, no_nvme)];
  }
  ds.gradient_accumulation_steps =
      ask.integer("How many gradient accumulation steps you're passing in your script? [1]: ", 1, 1,
                  settings::kMaxCount);
  if (ask.yes_no("Do you want to use gradient clipping? [yes/NO]: ", false)) {
    ds.gradient_clipping = ask.number("What is the gradient clipping value? [1.0]: ", 1.0);
  }
  if (ds.zero_stage == 3) {
    ds.zero3_save_16bit_model = ask.yes_no(
        "Do you want to save 16-bit model weights when using ZeRO Stage-3? [yes/NO]: ", false);
  }
}

// Accelerate asks for DeepSpeed on one process and on GPUs, not for multi-CPU.
void ask_deepspeed(Asker& ask, ClusterAnswers& answers) {
  if (!ask.yes_no("Do you want to use DeepSpeed? [yes/NO]: ", false)) return;
  answers.distributed_type = "DEEPSPEED";
  DeepSpeedAnswers& ds = answers.deepspeed.emplace();
  if (ask.yes_no("Do you want to specify a json file to a DeepSpeed config? [yes/NO]: ", false)) {
    ds.config_file =
        ask.text("Please enter the path to the json DeepSpeed config file: ", std::string("none"));
  } else {
    ask_deepspeed_settings(ask, ds);
  }
  ds.zero3_init_flag = ask.yes_no(
      "Do you want to enable `deepspeed.zero.Init` when using ZeRO Stage-3 for constructing "
      "massive models? [yes/NO]: ",
      false);
}

// Accelerate's wrap-policy questions, in its order and words. Accelerate
// also offers a Transformers model's `_no_split_modules` for the class
// names, which a C++ model does not have, so the names are asked directly.
void ask_fsdp_wrap_policy(Asker& ask, FsdpAnswers& fsdp) {
  std::vector<std::string> policies;  // in fsdp_plugin.h's order, Accelerate's
  for (const auto& row : accelerate::detail::kFsdpAutoWrapPolicyNames)
    policies.emplace_back(row.name);
  const int policy = ask.prompter().choose("What should be your auto wrap policy?", policies, 0);
  fsdp.auto_wrap_policy = policies[policy];
  if (policy == 0) {
    for (;;) {
      const std::string names = ask.text(
          "Specify the comma-separated list of transformer layer class names (case-sensitive) to "
          "wrap ,e.g, :`BertLayer`, `GPTJBlock`, `T5Block`, `BertLayer,BertEmbeddings,"
          "BertSelfOutput` ...? : ",
          std::nullopt);
      if (settings::kFsdpTransformerClsToWrap.try_parse(names)) {
        fsdp.transformer_layer_cls_to_wrap = names;
        break;
      }
      ask.prompter().say("Please enter one class name or more, separated by commas.");
    }
  } else if (policy == 1) {
    fsdp.min_num_params = ask.integer(
        "What should be your FSDP's minimum number of parameters for Default Auto Wrapping "
        "Policy? [1e8]: ",
        100000000, 0, 2000000000);
  }
}

// Accelerate asks for FSDP on GPUs, with its defaults (FULL_SHARD, ZeRO
// stage 3); a strategy the engine cannot run would be refused and asked again.
void ask_fsdp(Asker& ask, ClusterAnswers& answers) {
  if (!ask.yes_no("Do you want to use FullyShardedDataParallel? [yes/NO]: ", false)) return;
  answers.distributed_type = "FSDP";
  FsdpAnswers& fsdp = answers.fsdp.emplace();
  fsdp.version =
      ask.prompter().choose("What should be your FSDP version? [2]: ", {"1", "2"}, 1) + 1;
  bool full_shard = false;
  if (fsdp.version == 1) {
    std::vector<std::string> strategies;
    for (int number = 1; number <= 5; ++number) {
      strategies.push_back(to_string(static_cast<settings::FsdpShardingStrategy>(number)));
    }
    const int index =
        ask.choose_runnable("What should be your sharding strategy?", strategies, 0, [](int i) {
          try {
            sharding::zero_stage_of(static_cast<settings::FsdpShardingStrategy>(i + 1));
            return std::string();
          } catch (const ConfigError& error) {
            return std::string(error.what()) + ".";
          }
        });
    fsdp.reshard_after_forward = strategies[index];
    full_shard = index == 0;
  } else {
    full_shard = ask.yes_no("Do you want to enable resharding after forward? [YES/no]: ", true);
    fsdp.reshard_after_forward = full_shard ? "true" : "false";
  }
  fsdp.offload_params =
      ask.yes_no("Do you want to offload parameters and gradients to CPU? [yes/NO]: ", false);
  if (full_shard) ask_fsdp_wrap_policy(ask, fsdp);
  std::vector<std::string> types;  // in fsdp_plugin.h's order, Accelerate's
  for (const auto& row : accelerate::detail::kFsdpStateDictTypeNames) types.emplace_back(row.name);
  fsdp.state_dict_type =
      types[ask.prompter().choose("What should be your FSDP's state dict type?", types, 2)];
  fsdp.cpu_ram_efficient_loading = ask.yes_no(
      "Do you want to enable CPU RAM efficient model loading? Only applicable to models built "
      "inside accelerator.zero3_init(). [YES/no]: ",
      true);
  if (fsdp.version == 1 && !fsdp.cpu_ram_efficient_loading) {
    fsdp.sync_module_states = ask.yes_no(
        "Do you want each individually wrapped FSDP unit to broadcast module parameters from "
        "rank 0 at the start? [YES/no]: ",
        true);
  }
}

}  // namespace

ClusterAnswers ask_cluster_questions(Prompter& prompter, const std::string& home) {
  Asker ask(prompter);
  ClusterAnswers answers;
  while (prompter.choose("In which compute environment are you running?",
                         {"This machine", "AWS (Amazon SageMaker)"}, 0) != 0) {
    prompter.say("Amazon SageMaker is not supported by accelerate-cpp; choose 'This machine'.");
  }
  const int type = prompter.choose("Which type of machine are you using?",
                                   {"No distributed training", "multi-CPU", "multi-GPU"}, 0);
  answers.distributed_type = type == 0 ? "NO" : type == 1 ? "MULTI_CPU" : "MULTI_GPU";
  const bool multi = type != 0;
  if (multi) ask_machines(ask, answers);

  if (type == 0) {
    answers.use_cpu = ask.yes_no(
        "Do you want to run your training on CPU only (even if a GPU is available)? [yes/NO]: ",
        false);
  } else {
    answers.use_cpu = type == 1;
  }
  if (type == 1 && ask.yes_no("Do you want accelerate to launch mpirun? [yes/NO]: ", false)) {
    std::string hostfile =
        ask.text("Please enter the path to the hostfile to use with mpirun [~/hostfile]: ",
                 std::string("~/hostfile"));
    if (hostfile == "~" || hostfile.rfind("~/", 0) == 0) hostfile = home + hostfile.substr(1);
    answers.mpirun_hostfile = hostfile;
  }

  if (type != 1) ask_deepspeed(ask, answers);
  if (type == 2 && !answers.deepspeed) ask_fsdp(ask, answers);
  const bool sharded = answers.deepspeed || answers.fsdp;

  if (multi || sharded) {
    const std::string what = answers.use_cpu ? "processes" : "GPU(s)";
    for (;;) {
      answers.num_processes = ask.integer(
          "How many " + what + " should be used for distributed training? [1]: ", 1, 1, 100000);
      if (answers.distributed_type != "MULTI_GPU" || answers.num_machines > 1 ||
          answers.num_processes > 1)
        break;
      prompter.say(
          "multi-GPU on one machine needs at least 2 GPUs; for one GPU, choose 'No distributed "
          "training'.");
    }
  }
  // As in Accelerate, not asked with DeepSpeed or FSDP (all GPUs are used).
  if (!answers.use_cpu && !sharded) {
    answers.gpu_ids = ask.gpu_ids(
        "What GPU(s) (by id) should be used for training on this machine as a comma-separated "
        "list? [all]: ");
  }
  // A DeepSpeed config file has its own fp16/bf16 sections.
  if (answers.deepspeed && answers.deepspeed->config_file) return answers;
  std::vector<std::string> precisions;
  for (MixedPrecision precision : kAllMixedPrecisions) precisions.push_back(to_string(precision));
  answers.mixed_precision =
      precisions[prompter.choose("Do you wish to use mixed precision?", precisions, 0)];
  return answers;
}

namespace {

// The keys Accelerate writes for these answers.
YAML::Node deepspeed_node(const DeepSpeedAnswers& ds, int num_machines) {
  YAML::Node node(YAML::NodeType::Map);
  if (ds.config_file) {
    node["deepspeed_config_file"] = string_node(*ds.config_file);
  } else {
    node["zero_stage"] = ds.zero_stage;
    if (ds.offload_optimizer_device)
      node["offload_optimizer_device"] = string_node(*ds.offload_optimizer_device);
    if (ds.offload_param_device)
      node["offload_param_device"] = string_node(*ds.offload_param_device);
    node["gradient_accumulation_steps"] = ds.gradient_accumulation_steps;
    if (ds.gradient_clipping) node["gradient_clipping"] = float_node(*ds.gradient_clipping);
    if (ds.zero3_save_16bit_model) node["zero3_save_16bit_model"] = *ds.zero3_save_16bit_model;
  }
  node["zero3_init_flag"] = ds.zero3_init_flag;
  // accelerate-cpp starts one launcher per machine: Accelerate's "standard".
  if (num_machines > 1) node["deepspeed_multinode_launcher"] = string_node("standard");
  return node;
}

}  // namespace

YAML::Node to_config_node(const ClusterAnswers& answers) {
  YAML::Node root(YAML::NodeType::Map);
  root["compute_environment"] = string_node("LOCAL_MACHINE");
  root["debug"] = answers.debug;
  root["distributed_type"] = string_node(answers.distributed_type);
  root["downcast_bf16"] = string_node("no");
  root["enable_cpu_affinity"] = false;
  if (answers.gpu_ids) root["gpu_ids"] = string_node(*answers.gpu_ids);
  root["machine_rank"] = answers.machine_rank;
  if (answers.main_process_ip) root["main_process_ip"] = string_node(*answers.main_process_ip);
  if (answers.main_process_port) root["main_process_port"] = *answers.main_process_port;
  root["main_training_function"] = string_node("main");
  if (!answers.deepspeed || !answers.deepspeed->config_file) {
    root["mixed_precision"] = string_node(answers.mixed_precision);
  }
  if (answers.deepspeed)
    root["deepspeed_config"] = deepspeed_node(*answers.deepspeed, answers.num_machines);
  if (answers.fsdp) {
    root["fsdp_config"]["fsdp_version"] = answers.fsdp->version;
    const std::string& reshard = answers.fsdp->reshard_after_forward;
    if (answers.fsdp->version == 2) {
      root["fsdp_config"]["fsdp_reshard_after_forward"] = reshard == "true";
    } else {
      root["fsdp_config"]["fsdp_reshard_after_forward"] = string_node(reshard);
    }
    if (answers.fsdp->auto_wrap_policy) {
      root["fsdp_config"]["fsdp_auto_wrap_policy"] = string_node(*answers.fsdp->auto_wrap_policy);
    }
    if (answers.fsdp->transformer_layer_cls_to_wrap) {
      root["fsdp_config"]["fsdp_transformer_layer_cls_to_wrap"] =
          string_node(*answers.fsdp->transformer_layer_cls_to_wrap);
    }
    if (answers.fsdp->min_num_params) {
      root["fsdp_config"]["fsdp_min_num_params"] = *answers.fsdp->min_num_params;
    }
    root["fsdp_config"]["fsdp_offload_params"] = answers.fsdp->offload_params;
    root["fsdp_config"]["fsdp_state_dict_type"] = string_node(answers.fsdp->state_dict_type);
    root["fsdp_config"]["fsdp_cpu_ram_efficient_loading"] = answers.fsdp->cpu_ram_efficient_loading;
    root["fsdp_config"]["fsdp_sync_module_states"] = answers.fsdp->sync_module_states;
  }
  if (answers.mpirun_hostfile)
    root["mpirun_config"]["mpirun_hostfile"] = string_node(*answers.mpirun_hostfile);
  root["num_machines"] = answers.num_machines;
  root["num_processes"] = answers.num_processes;
  root["rdzv_backend"] = string_node(answers.rdzv_backend);
  root["same_network"] = answers.same_network;
  root["tpu_env"] = YAML::Node(YAML::NodeType::Sequence);
  root["tpu_use_cluster"] = false;
  root["tpu_use_sudo"] = false;
  root["use_cpu"] = answers.use_cpu;
  return root;
}

}  // namespace accelerate::config
