#include "config/questionnaire.h"

#include <algorithm>
#include <cctype>

#include "accelerate/mixed_precision.h"
#include "common/environment_text.h"
#include "config/config_yaml.h"

namespace accelerate::config {
namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
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
      prompter_.say("Please enter a whole number from " + std::to_string(min) + " to " + std::to_string(max) + ".");
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

  std::string gpu_ids(const std::string& prompt) {
    for (;;) {
      std::string answer = text(prompt, std::string("all"));
      answer.erase(std::remove(answer.begin(), answer.end(), ' '), answer.end());
      if (lower(answer) == "all") return "all";
      bool valid = answer.front() != ',' && answer.back() != ',' && answer.find(",,") == std::string::npos &&
                   std::all_of(answer.begin(), answer.end(), [](unsigned char c) { return std::isdigit(c) || c == ','; });
      if (valid) return answer;
      prompter_.say("Please enter 'all' or GPU ids separated by commas, such as 0,1.");
    }
  }

  Prompter& prompter() { return prompter_; }

 private:
  Prompter& prompter_;
};

void ask_machines(Asker& ask, ClusterAnswers& answers) {
  answers.num_machines =
      ask.integer("How many different machines will you use (use more than 1 for multi-node training)? [1]: ", 1, 1, 100000);
  if (answers.num_machines > 1) {
    const std::string rank_question = "What is the rank of this machine?";
    if (answers.num_machines <= 10) {
      std::vector<std::string> ranks;
      for (int i = 0; i < answers.num_machines; ++i) ranks.push_back(std::to_string(i));
      answers.machine_rank = ask.prompter().choose(rank_question, ranks, 0);
    } else {
      answers.machine_rank = ask.integer(rank_question + " ", std::nullopt, 0, answers.num_machines - 1);
    }
    answers.main_process_ip =
        ask.text("What is the IP address of the machine that will host the main process? ", std::nullopt);
    answers.main_process_port =
        ask.integer("What is the port you will use to communicate with the main process? [29500]: ", 29500, 1, 65535);
    answers.same_network = ask.yes_no(
        "Are all the machines on the same local network? Answer `no` if nodes are on the cloud and/or on "
        "different network hosts [YES/no]: ",
        true);
    // Accelerate asks for a rendezvous backend here; accelerate-cpp has only
    // the static one, so say what it needs instead of asking.
    if (!answers.same_network) {
      ask.prompter().say("accelerate-cpp uses the static rendezvous (rdzv_backend: static): every machine must "
                         "reach the main process's address and port.");
    }
  }
  answers.debug = ask.yes_no(
      "Should distributed operations be checked while running for errors? This can avoid timeout issues but will "
      "be slower. [yes/NO]: ",
      false);
}

}  // namespace

ClusterAnswers ask_cluster_questions(Prompter& prompter, const std::string& home) {
  Asker ask(prompter);
  ClusterAnswers answers;
  while (prompter.choose("In which compute environment are you running?", {"This machine", "AWS (Amazon SageMaker)"}, 0) != 0) {
    prompter.say("Amazon SageMaker is not supported by accelerate-cpp; choose 'This machine'.");
  }
  const int type = prompter.choose("Which type of machine are you using?",
                                   {"No distributed training", "multi-CPU", "multi-GPU"}, 0);
  answers.distributed_type = type == 0 ? "NO" : type == 1 ? "MULTI_CPU" : "MULTI_GPU";
  const bool multi = type != 0;
  if (multi) ask_machines(ask, answers);

  if (type == 0) {
    answers.use_cpu = ask.yes_no(
        "Do you want to run your training on CPU only (even if a GPU is available)? [yes/NO]: ", false);
  } else {
    answers.use_cpu = type == 1;
  }
  if (type == 1 && ask.yes_no("Do you want accelerate to launch mpirun? [yes/NO]: ", false)) {
    std::string hostfile = ask.text("Please enter the path to the hostfile to use with mpirun [~/hostfile]: ",
                                    std::string("~/hostfile"));
    if (hostfile == "~" || hostfile.rfind("~/", 0) == 0) hostfile = home + hostfile.substr(1);
    answers.mpirun_hostfile = hostfile;
  }

  if (multi) {
    const std::string what = type == 1 ? "processes" : "GPU(s)";
    for (;;) {
      answers.num_processes =
          ask.integer("How many " + what + " should be used for distributed training? [1]: ", 1, 1, 100000);
      if (type != 2 || answers.num_machines > 1 || answers.num_processes > 1) break;
      prompter.say("multi-GPU on one machine needs at least 2 GPUs; for one GPU, choose 'No distributed training'.");
    }
  }
  if (!answers.use_cpu) {
    answers.gpu_ids = ask.gpu_ids(
        "What GPU(s) (by id) should be used for training on this machine as a comma-separated list? [all]: ");
  }
  std::vector<std::string> precisions;
  for (MixedPrecision precision : kAllMixedPrecisions) precisions.push_back(to_string(precision));
  answers.mixed_precision = precisions[prompter.choose("Do you wish to use mixed precision?", precisions, 0)];
  return answers;
}

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
  root["mixed_precision"] = string_node(answers.mixed_precision);
  if (answers.mpirun_hostfile) root["mpirun_config"]["mpirun_hostfile"] = string_node(*answers.mpirun_hostfile);
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
