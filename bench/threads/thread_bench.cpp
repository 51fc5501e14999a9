// thread_bench: ms per training step of examples/mnist's BasicNet for each
// intra-op thread count from 1 to the cores, on the LibTorch this was built
// with (docs/performance.md, "Threads on LibTorch 1.13 and 2.6").
//
//   thread_bench [--max_threads N] [--steps 40] [--warmup 5] [--rounds 1]
//                [--launcher PATH/TO/accelerate] [--before]
//
// Every measurement is a fresh process (this program, re-run with --child),
// because OpenMP and OpenBLAS read their variables once, when they load. Rows:
//
//   threads=T          what `accelerate launch --num_cpu_threads_per_process T`
//                      gives a rank: OMP_NUM_THREADS=T, OPENBLAS_NUM_THREADS=1,
//                      and OMP_WAIT_POLICY=PASSIVE unless exported
//   default(direct)    OMP_NUM_THREADS and OPENBLAS_NUM_THREADS unset: what the
//                      Accelerator picks on its own in a program started directly
//   default(launcher)  through `accelerate launch --cpu --num_processes 1` with
//                      both unset: the launcher's default (when the `accelerate`
//                      executable of this build exists or --launcher names one)
//
// --before gives threads=T the launcher's settings before they changed
// (OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=T, OMP_WAIT_POLICY unset) and skips
// the default rows. Other variables (GOMP_SPINCOUNT, OPENBLAS_THREAD_TIMEOUT,
// ...) pass through. The child builds an accelerate::Accelerator (which sets
// the threads as in any program), prepares BasicNet and AdamW (lr 1e-3), and
// trains on 8 fixed batches of 64 random 28x28 images: --warmup untimed
// steps, then --steps timed ones. One line per row:
//
//   threads=2  ms_per_step=<mean> median_ms=<median> ratio_to_1=<mean / threads=1's>
//              (intra_op=.. blas=.. cpu_ms=<CPU time of all threads per step>)
//
// With --rounds R (rows interleaved, every other round backwards) the figure
// is the median over the rounds of each row's mean.
#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <accelerate/accelerate.h>

#include "mnist_common.h"  // examples/mnist: BasicNet

extern char** environ;

namespace {

struct Options {
  int max_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int steps = 40, warmup = 5, rounds = 1;
  std::string launcher;
  bool child = false, before = false;
};

template <class F>
F blas_symbol(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

// OpenBLAS's own facts, when OpenBLAS is the BLAS LibTorch loaded.
std::string blas_facts() {
  auto parallel = blas_symbol<int (*)()>("openblas_get_parallel");
  auto threads = blas_symbol<int (*)()>("openblas_get_num_threads");
  auto config = blas_symbol<char* (*)()>("openblas_get_config");
  if (!parallel || !threads || !config) return "BLAS: not OpenBLAS (no openblas_get_parallel)";
  const char* kinds[] = {"sequential", "pthreads", "OpenMP"};
  const int kind = parallel();
  return std::string("BLAS: ") + config() + ", threading " +
         (kind >= 0 && kind <= 2 ? kinds[kind] : "?") + ", " + std::to_string(threads()) +
         " threads";
}

std::string library_of(const char* symbol) {
  Dl_info info{};
  void* address = dlsym(RTLD_DEFAULT, symbol);
  return address && dladdr(address, &info) && info.dli_fname ? info.dli_fname : "not loaded";
}

// CPU time of all threads of this process (user + system).
double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// The child: train, print "result ms_per_step=.. median_ms=.. cpu_ms=.. intra_op=.. blas=..".
int run_child(const Options& options) {
  accelerate::Accelerator accelerator;  // sets the intra-op threads
  torch::manual_seed(42);
  mnist::BasicNet model;
  accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                       torch::optim::AdamWOptions(1e-3));
  accelerator.prepare(model, optimizer);
  std::vector<torch::Tensor> images, labels;
  for (int i = 0; i < 8; ++i) {
    images.push_back(torch::randn({64, 1, 28, 28}));
    labels.push_back(torch::randint(0, 10, {64}, torch::kLong));
  }
  std::vector<double> ms;
  double cpu_start = 0;
  for (int step = 0; step < options.warmup + options.steps; ++step) {
    if (step == options.warmup) cpu_start = cpu_seconds();
    const auto start = std::chrono::steady_clock::now();
    optimizer.zero_grad();
    auto loss = torch::nll_loss(model->forward(images[step % 8]), labels[step % 8]);
    accelerator.backward(loss);
    optimizer.step();
    const auto stop = std::chrono::steady_clock::now();
    if (step >= options.warmup)
      ms.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
  }
  const double cpu_ms = (cpu_seconds() - cpu_start) * 1000 / options.steps;
  double mean = 0;
  for (double m : ms) mean += m / ms.size();
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  auto blas_threads = blas_symbol<int (*)()>("openblas_get_num_threads");
  std::printf("result ms_per_step=%.2f median_ms=%.2f cpu_ms=%.2f intra_op=%d blas=%d\n", mean,
              ms[ms.size() / 2], cpu_ms, at::get_num_threads(), blas_threads ? blas_threads() : 0);
  return 0;
}

struct Row {
  std::string name;
  std::map<std::string, std::string> set;  // variables to set ("" = unset)
  bool through_launcher = false;
};

// Runs one row in a child process; returns its "result" line's fields.
std::map<std::string, std::string> measure(const Row& row, const Options& options) {
  std::vector<std::string> argv_text;
  if (row.through_launcher) {
    argv_text = {options.launcher,      "launch", "--cpu", "--num_processes", "1", "--quiet",
                 "--main_process_port", "0"};
  }
  char self[4096];  // this program's path, for the launcher too
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self));
  if (length <= 0 || length == sizeof(self)) throw std::runtime_error("cannot read /proc/self/exe");
  argv_text.insert(argv_text.end(),
                   {std::string(self, length), "--child", "--steps", std::to_string(options.steps),
                    "--warmup", std::to_string(options.warmup)});
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = fork();
  if (pid == 0) {
    for (const auto& [name, value] : row.set) {
      if (value.empty())
        unsetenv(name.c_str());
      else
        setenv(name.c_str(), value.c_str(), 1);
    }
    dup2(pipe_fds[1], STDOUT_FILENO);
    close(pipe_fds[0]);
    std::vector<char*> argv;
    for (auto& text : argv_text) argv.push_back(text.data());
    argv.push_back(nullptr);
    execve(argv[0], argv.data(), environ);
    _exit(127);
  }
  close(pipe_fds[1]);
  std::string output;
  char buffer[4096];
  for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof(buffer))) > 0;) output.append(buffer, n);
  close(pipe_fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  const auto at = output.find("result ");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || at == std::string::npos) {
    throw std::runtime_error(row.name + ": child failed:\n" + output);
  }
  std::map<std::string, std::string> fields;
  std::string line = output.substr(at + 7, output.find('\n', at) - at - 7) + " ";
  for (size_t begin = 0, end; (end = line.find(' ', begin)) != std::string::npos; begin = end + 1) {
    const std::string field = line.substr(begin, end - begin);
    const auto eq = field.find('=');
    if (eq != std::string::npos) fields[field.substr(0, eq)] = field.substr(eq + 1);
  }
  return fields;
}

Options parse(int argc, char** argv) {
  Options options;
#ifdef ACCELERATE_CLI_PATH
  if (access(ACCELERATE_CLI_PATH, X_OK) == 0) options.launcher = ACCELERATE_CLI_PATH;
#endif
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--child" || flag == "--before") {
      (flag == "--child" ? options.child : options.before) = true;
      continue;
    }
    if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--max_threads")
      options.max_threads = std::stoi(value);
    else if (flag == "--steps")
      options.steps = std::stoi(value);
    else if (flag == "--warmup")
      options.warmup = std::stoi(value);
    else if (flag == "--rounds")
      options.rounds = std::stoi(value);
    else if (flag == "--launcher")
      options.launcher = value;
    else
      throw std::invalid_argument("unknown flag " + flag);
  }
  if (options.max_threads < 1 || options.steps < 1 || options.warmup < 0 || options.rounds < 1) {
    throw std::invalid_argument("--max_threads, --steps and --rounds must be at least 1");
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options options = parse(argc, argv);
  if (options.child) return run_child(options);

  std::cout << at::get_parallel_info() << blas_facts()
            << "\nOpenMP runtime: " << library_of("omp_get_max_threads")
            << "\nsgemm_: " << library_of("sgemm_") << "\n";
  for (const char* name : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT"}) {
    const char* value = std::getenv(name);
    std::cout << name << "=" << (value ? value : "[not set]") << "\n";
  }
  std::vector<Row> rows;
  const bool exported_policy = std::getenv("OMP_WAIT_POLICY") != nullptr;
  for (int t = 1; t <= options.max_threads; ++t) {
    const std::string threads = std::to_string(t);
    Row row{"threads=" + threads, {{"OMP_NUM_THREADS", threads}, {"OPENBLAS_NUM_THREADS", "1"}}};
    if (!exported_policy) row.set["OMP_WAIT_POLICY"] = "PASSIVE";
    if (options.before) {
      row.set = {
          {"OMP_NUM_THREADS", threads}, {"OPENBLAS_NUM_THREADS", threads}, {"OMP_WAIT_POLICY", ""}};
    }
    rows.push_back(row);
  }
  const std::map<std::string, std::string> unset = {{"OMP_NUM_THREADS", ""},
                                                    {"OPENBLAS_NUM_THREADS", ""}};
  if (!options.before) {
    rows.push_back({"default(direct)", unset});
    if (!options.launcher.empty()) rows.push_back({"default(launcher)", unset, true});
  }

  std::vector<std::vector<double>> means(rows.size());
  std::vector<std::map<std::string, std::string>> last(rows.size());
  for (int round = 0; round < options.rounds; ++round) {
    for (size_t i = 0; i < rows.size(); ++i) {
      const size_t r = round % 2 ? rows.size() - 1 - i : i;  // every other round backwards
      last[r] = measure(rows[r], options);
      means[r].push_back(std::stod(last[r]["ms_per_step"]));
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double one = median(means[0]);
  for (size_t r = 0; r < rows.size(); ++r) {
    std::printf(
        "%-18s ms_per_step=%.1f median_ms=%.1f ratio_to_1=%.2f (intra_op=%s blas=%s cpu_ms=%s)\n",
        rows[r].name.c_str(), median(means[r]), std::stod(last[r]["median_ms"]),
        median(means[r]) / one, last[r]["intra_op"].c_str(), last[r]["blas"].c_str(),
        last[r]["cpu_ms"].c_str());
  }
  return 0;
} catch (const std::exception& error) {
  std::cerr << "thread_bench: error: " << error.what() << std::endl;
  return 1;
}
