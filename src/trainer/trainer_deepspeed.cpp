#include "trainer/trainer_deepspeed.h"

#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "accelerate/common/errors.h"
#include "common/environment_text.h"
#include "common/setting_values.h"
#include "common/settings.h"
#include "sharding/deepspeed_config.h"
#include "sharding/plugin_from_environment.h"

namespace accelerate::trainer {

namespace {

// transformers' fill_match, minus the filling: an explicit file value that
// differs from the TrainingArguments' is a mismatch ("auto" and absent are not).
class Mismatches {
 public:
  template <class T>
  void check(const sharding::AutoValue<T>& file_value, const T& hf_value, const char* ds_key,
             const char* hf_key) {
    if (file_value.has_value() && !(file_value.value == hf_value)) {
      add(ds_key, text(file_value.value), hf_key, text(hf_value));
    }
  }
  void check_param(const std::optional<sharding::ParamSection>& section, const char* section_name,
                   const char* key, const sharding::ParamValue& hf_value, const char* hf_key) {
    if (!section) return;
    const auto found = section->params.find(key);
    if (found == section->params.end() || !found->second.has_value()) return;
    if (!(found->second.value == hf_value)) {
      add(std::string(section_name) + ".params." + key, text(found->second.value), hf_key,
          text(hf_value));
    }
  }
  const std::vector<std::string>& found() const { return found_; }

 private:
  static std::string text(double v) { return accelerate::detail::shortest_number_text(v); }
  static std::string text(int64_t v) { return std::to_string(v); }
  static std::string text(bool v) { return v ? "true" : "false"; }
  static std::string text(const std::string& v) { return "\"" + v + "\""; }
  static std::string text(const std::vector<double>& v) {
    std::string out = "[";
    for (double x : v)
      out += (out.size() > 1 ? ", " : "") + accelerate::detail::shortest_number_text(x);
    return out + "]";
  }
  static std::string text(const sharding::ParamValue& v) {
    return std::visit([](const auto& x) { return text(x); }, v);
  }
  void add(const std::string& ds_key, const std::string& ds_value, const std::string& hf_key,
           const std::string& hf_value) {
    found_.push_back(ds_key + "=" + ds_value + " vs " + hf_key + "=" + hf_value);
  }
  std::vector<std::string> found_;
};

}  // namespace

void apply_deepspeed_arguments(const TrainingArguments& args, AcceleratorOptions& options,
                               const Environment& env) {
  if (options.fsdp_plugin()) return;
  std::optional<DeepSpeedPlugin> plugin = options.deepspeed_plugin();
  std::optional<sharding::DeepSpeedConfig> file;
  // Whether someone chose the plugin's clipping (else it is Accelerate's "auto").
  bool clipping_chosen = false;
  if (plugin) {
    if (plugin->hf_ds_config()) file = sharding::read_deepspeed_config(*plugin->hf_ds_config());
    // DeepSpeedPlugin's default 1.0 (and unset) stand for Accelerate's "auto".
    clipping_chosen = plugin->gradient_clipping() && *plugin->gradient_clipping() != 1.0;
  } else {
    std::string launched_as;
    plugin = sharding::deepspeed_plugin_from_environment(env, &launched_as, &file);
    if (!plugin || launched_as != "DEEPSPEED") return;
    clipping_chosen =
        settings::kGradientClipping.read(settings::EnvironmentValues(env)).has_value();
  }
  Mismatches mismatches;
  const double max_grad_norm = args.max_grad_norm();
  if (file) {
    const auto& f = *file;
    mismatches.check(f.train_micro_batch_size_per_gpu, args.per_device_train_batch_size(),
                     "train_micro_batch_size_per_gpu", "per_device_train_batch_size");
    mismatches.check(f.gradient_accumulation_steps,
                     static_cast<int64_t>(args.gradient_accumulation_steps()),
                     "gradient_accumulation_steps", "gradient_accumulation_steps");
    mismatches.check(f.gradient_clipping, max_grad_norm, "gradient_clipping", "max_grad_norm");
    mismatches.check_param(f.optimizer, "optimizer", "lr", args.learning_rate(), "learning_rate");
    mismatches.check_param(f.optimizer, "optimizer", "betas",
                           std::vector<double>{args.adam_beta1(), args.adam_beta2()},
                           "adam_beta1+adam_beta2");
    mismatches.check_param(f.optimizer, "optimizer", "eps", args.adam_epsilon(), "adam_epsilon");
    mismatches.check_param(f.optimizer, "optimizer", "weight_decay", args.weight_decay(),
                           "weight_decay");
    mismatches.check_param(f.scheduler, "scheduler", "warmup_max_lr", args.learning_rate(),
                           "learning_rate");
    mismatches.check(f.fp16.enabled, args.fp16(), "fp16.enabled", "fp16");
    mismatches.check(f.bf16.enabled, args.bf16(), "bf16.enabled", "bf16");
    // transformers fills "auto" before Accelerate sees the file.
    if (f.gradient_clipping.is_auto()) plugin->gradient_clipping(max_grad_norm);
    if (f.gradient_accumulation_steps.is_auto()) {
      plugin->gradient_accumulation_steps(args.gradient_accumulation_steps());
    }
  } else {
    // Without a file, Accelerate's plugin writes what the launch (or the
    // program) set into its config, and "auto" for what nobody set.
    if (!clipping_chosen) {
      plugin->gradient_clipping(max_grad_norm);
    } else {
      mismatches.check(sharding::AutoValue<double>::of(plugin->gradient_clipping().value_or(0.0)),
                       max_grad_norm, "gradient_clipping", "max_grad_norm");
    }
    if (const auto steps = plugin->gradient_accumulation_steps()) {
      mismatches.check(sharding::AutoValue<int64_t>::of(*steps),
                       static_cast<int64_t>(args.gradient_accumulation_steps()),
                       "gradient_accumulation_steps", "gradient_accumulation_steps");
    }
    plugin->gradient_accumulation_steps(args.gradient_accumulation_steps());
  }
  if (!mismatches.found().empty()) {
    std::string list;
    for (const auto& item : mismatches.found()) list += (list.empty() ? "" : "; ") + item;
    throw ConfigError((file ? file->source : std::string("the DeepSpeed plugin")) +
                      " mismatches the TrainingArguments: " + list +
                      " (set these DeepSpeed values to \"auto\" to take the TrainingArguments')");
  }
  options.deepspeed_plugin(*plugin);
}

}  // namespace accelerate::trainer
