// Each sharded-training launch setting is one row of
// common/sharding_launch_settings.h: its flag, help text, value name and
// default, its config file key, and the variable the ranks get all come
// from that row and the Setting it names, so none can drift from another.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "common/sharding_launch_settings.h"
#include "config/config_file.h"
#include "config/config_keys.h"
#include "launcher/child_environment.h"
#include "launcher/config_application.h"
#include "launcher/launch_options.h"

namespace accelerate::launcher {
namespace {

// A value the setting accepts, as its variable would hold it.
template <class T>
std::string sample_text(const settings::Setting<T>& setting) {
  const std::string text = setting.format(setting.fallback);
  // Text settings whose default means "nothing" (no file, no classes).
  if constexpr (std::is_same_v<T, std::string>) {
    if (text.empty() || text == "none") return "Block";
  }
  return text;
}

// The value the launcher gives the ranks remembers where it was written:
// the flag as the user spelled it, or the config file's key and line.
// The switch that puts a section's rows in use, and the distributed_type a
// config file names for it ("" for parallelism_config, which needs none).
std::string switch_of(const std::string& section) {
  if (section == "parallelism_config") return "--use_parallelism_config";
  return section == "deepspeed_config" ? "--use_deepspeed" : "--use_fsdp";
}

void set_switch(LaunchOptions& options, const std::string& section, bool on) {
  options.use_deepspeed = on && section == "deepspeed_config";
  options.use_fsdp = on && section == "fsdp_config";
  options.use_parallelism_config = on && section == "parallelism_config";
}

template <class T>
void expect_origins(const std::string& section, const std::string& name,
                    const settings::Setting<T>& setting, const std::string& value) {
  const std::string kind = switch_of(section);
  std::string dashed = "--" + name;
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  const LaunchOptions flagged = parse_launch_arguments({kind, dashed, value, "p"}).options;
  const auto from_flag = launch_setting_values(flagged, Environment()).find(setting.variable());
  ASSERT_TRUE(from_flag.has_value());
  EXPECT_EQ(from_flag->text, value);
  EXPECT_EQ(from_flag->origin.subject(), dashed);

  LaunchOptions from_file;
  const std::string type = section == "deepspeed_config" ? "DEEPSPEED" : "FSDP";
  launcher::apply_config_file(
      config::parse_config_text(
          "distributed_type: " + type + "\n" + section + ":\n  " + name + ": " + value + "\n",
          "c.yaml"),
      from_file);
  const auto given = launch_setting_values(from_file, Environment()).find(setting.variable());
  ASSERT_TRUE(given.has_value());
  EXPECT_EQ(given->origin.subject(), "c.yaml:3: key '" + section + "." + name + "'");
}

template <class T>
void expect_one_row(const std::string& section, const std::string& name,
                    const settings::Setting<T>& setting, const char* metavar,
                    const char* yaml_type) {
  SCOPED_TRACE(section + "." + name);
  const FlagSpec* flag = find_launch_flag(name);
  ASSERT_NE(flag, nullptr) << "no --" << name;
  EXPECT_STREQ(flag->help, setting.about.meaning);
  EXPECT_STREQ(flag->value_name, metavar);
  EXPECT_STREQ(flag->default_text, setting.about.default_text);
  // The words users see in docs and errors name the same flag and key.
  EXPECT_EQ(std::string(setting.about.hf_spelling), "--" + name + " / " + section + "." + name);
  const config::KeySpec* key = config::find_section_key(section, name);
  ASSERT_NE(key, nullptr) << "the config file does not accept " << section << "." << name;
  EXPECT_EQ(key->use, config::KeyUse::kSetting);
  EXPECT_STREQ(config::to_string(key->type), yaml_type);
  // A value given by the flag reaches the ranks under the setting's variable.
  LaunchOptions options;
  set_switch(options, section, true);
  std::string value = sample_text(setting);
  // A parallelism_config section whose values are all false is off (no
  // sizes in use), so its switch is sampled on.
  if constexpr (std::is_same_v<T, bool>) {
    if (section == "parallelism_config") value = "true";
  }
  flag->apply(options, "--" + name, value);
  EXPECT_EQ(flag->show(options), value);
  const Environment env = build_child_environment(options, 0, Environment(), 1);
  ASSERT_EQ(env.count(setting.variable()), 1u) << setting.variable();
  EXPECT_EQ(env.at(setting.variable()), value);
  // ...and only while its kind of sharding is in use.
  set_switch(options, section, false);
  EXPECT_EQ(build_child_environment(options, 0, Environment(), 1).count(setting.variable()), 0u);
  expect_origins(section, name, setting, value);
}

TEST(LaunchSettingRows, EveryShardingSettingsFlagKeyVariableAndHelpComeFromOneRow) {
  const char* const S = config::to_string(config::KeyType::kString);
  const char* const I = config::to_string(config::KeyType::kInt);
  const char* const B = config::to_string(config::KeyType::kBool);
  int rows = 0;
#define ACCELERATE_EXPECT_ROW(section, name, Type, setting, metavar, yaml) \
  expect_one_row<Type>(#section, #name, settings::setting, metavar, yaml); \
  ++rows;
  ACCELERATE_SHARDING_LAUNCH_SETTINGS(ACCELERATE_EXPECT_ROW)
#undef ACCELERATE_EXPECT_ROW
  EXPECT_EQ(rows, static_cast<int>(settings::sharding_launch_settings().size()));
  EXPECT_EQ(settings::sharding_setting_names("deepspeed_config").size(), 7u);
  EXPECT_EQ(settings::sharding_setting_names("fsdp_config").size(), 12u);
  EXPECT_EQ(settings::sharding_setting_names("parallelism_config").size(), 7u);
}

}  // namespace
}  // namespace accelerate::launcher
