#include "common/sharding_launch_settings.h"

namespace accelerate::settings {

const std::vector<ShardingLaunchSetting>& sharding_launch_settings() {
  // Built on first use: the Settings are other files' globals.
#define ACCELERATE_ROW(section, name, Type, setting, metavar, yaml) \
  {#section, #name, metavar, &setting.about},
  static const std::vector<ShardingLaunchSetting> rows = {
      ACCELERATE_SHARDING_LAUNCH_SETTINGS(ACCELERATE_ROW)};
#undef ACCELERATE_ROW
  return rows;
}

std::vector<std::string> sharding_setting_names(const std::string& section) {
  std::vector<std::string> names;
  for (const ShardingLaunchSetting& row : sharding_launch_settings()) {
    if (section == row.section) names.push_back(row.name);
  }
  return names;
}

}  // namespace accelerate::settings
