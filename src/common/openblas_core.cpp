#include "common/openblas_core.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>

#include "common/settings.h"

namespace accelerate {
namespace detail {
namespace {

bool has_all(const std::vector<std::string>& flags, std::initializer_list<const char*> wanted) {
  return std::all_of(wanted.begin(), wanted.end(), [&](const char* flag) {
    return std::find(flags.begin(), flags.end(), flag) != flags.end();
  });
}

std::string lowercase(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// OpenBLAS's x86 cores without AVX: what its detection falls back to for a
// model it does not know (its corename table, lower case).
bool is_pre_avx_core(const std::string& core) {
  static const char* const kPreAvx[] = {"unknown",  "katmai",     "coppermine", "northwood",
                                        "prescott", "banias",     "atom",       "core2",
                                        "penryn",   "dunnington", "nehalem"};
  const std::string name = lowercase(core);
  return std::any_of(std::begin(kPreAvx), std::end(kPreAvx),
                     [&](const char* known) { return name == known; });
}

using CoreName = char* (*)();

std::optional<std::string> core_name_from(void* library) {
  const auto core_name = reinterpret_cast<CoreName>(dlsym(library, "openblas_get_corename"));
  if (core_name == nullptr) return std::nullopt;
  const char* name = core_name();
  if (name == nullptr || *name == '\0') return std::nullopt;
  return std::string(name);
}

}  // namespace

std::optional<std::string> openblas_core_for_cpu(const std::vector<std::string>& cpu_flags) {
  const bool avx512 =
      has_all(cpu_flags, {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"});
  if (avx512 && has_all(cpu_flags, {"avx512_bf16"})) return std::string("Cooperlake");
  if (avx512) return std::string("SkylakeX");
  if (has_all(cpu_flags, {"avx2", "fma"})) return std::string("Haswell");
  return std::nullopt;
}

std::optional<std::string> faster_openblas_core(const std::string& picked,
                                                const std::vector<std::string>& cpu_flags) {
  if (!is_pre_avx_core(picked)) return std::nullopt;
  return openblas_core_for_cpu(cpu_flags);
}

std::optional<std::string> openblas_core_in_this_process() { return core_name_from(RTLD_DEFAULT); }

std::optional<std::string> openblas_core_of_system_library() {
  // RTLD_LOCAL: its symbols stay out of this process's namespace. Loading
  // starts OpenBLAS's thread pool (cores - 1 idle threads), which dlclose
  // ends: about 15 ms once per launch.
  void* library = dlopen("libopenblas.so.0", RTLD_LAZY | RTLD_LOCAL);
  if (library == nullptr) return std::nullopt;
  std::optional<std::string> core = core_name_from(library);
  dlclose(library);
  return core;
}

std::optional<std::string> openblas_core_note(const std::optional<std::string>& picked,
                                              const std::vector<std::string>& cpu_flags,
                                              const Environment& env) {
  if (!picked || lookup(env, settings::kOpenblasCoretype.variable())) return std::nullopt;
  const auto faster = faster_openblas_core(*picked, cpu_flags);
  if (!faster) return std::nullopt;
  return "OpenBLAS runs its generic " + *picked +
         " kernels on this CPU, which has the vector units of its " + *faster +
         " kernels: fp32 matrix products can be several times faster with " +
         settings::kOpenblasCoretype.variable() + "=" + *faster +
         " exported before the program starts (`accelerate launch` sets it)";
}

}  // namespace detail
}  // namespace accelerate
