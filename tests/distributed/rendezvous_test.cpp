// Real processes on 127.0.0.1 through a TCPStore: started by our launcher, or
// by the test with the variables torchrun would set. Covers the end-to-end
// path and the bad-input cases: unreachable master, port in use, a rank that
// never comes, a rank that leaves, bad variables.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/launcher_process.h"

namespace accelerate::testing {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

const std::string kProbe = COLLECTIVES_PROBE_PATH;

// A TCP socket listening on a free loopback port, closed on destruction.
class ListeningSocket {
 public:
  ListeningSocket() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    listen(fd_, 1);
    socklen_t length = sizeof(address);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
  }
  ~ListeningSocket() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A port that was free a moment ago (nobody listens on it).
int free_port() { return ListeningSocket().port(); }

ChildProcess::EnvironmentChanges rank_env(int rank, int world_size, int port,
                                          const std::string& timeout_s) {
  return {{"RANK", std::to_string(rank)},       {"WORLD_SIZE", std::to_string(world_size)},
          {"LOCAL_RANK", std::to_string(rank)}, {"LOCAL_WORLD_SIZE", std::to_string(world_size)},
          {"MASTER_ADDR", "127.0.0.1"},         {"MASTER_PORT", std::to_string(port)},
          {"ACCELERATE_TIMEOUT", timeout_s},    {"OMP_NUM_THREADS", "1"}};
}

class LaunchedCollectives : public ::testing::TestWithParam<int> {};

TEST_P(LaunchedCollectives, ReferenceValuesHoldOnEveryRank) {
  const int n = GetParam();
  auto result = run_launcher({"launch", "--cpu", "--num_processes", std::to_string(n),
                              "--main_process_port", "0", kProbe, "check"},
                             {}, 60s);
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  for (int r = 0; r < n; ++r) {
    EXPECT_THAT(result.out,
                HasSubstr("[rank" + std::to_string(r) + "]: rank " + std::to_string(r) +
                          ": collectives ok (rank " + std::to_string(r) + "/" + std::to_string(n)));
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, LaunchedCollectives, ::testing::Values(2, 3));

TEST(HelloDistributed, TwoProcessesComputePiOnce) {
  auto result = run_launcher({"launch", "--cpu", "--num_processes", "2", "--main_process_port", "0",
                              HELLO_DISTRIBUTED_PATH},
                             {}, 60s);
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_THAT(result.out, HasSubstr("[rank0]: pi ~= 3.14159265"));
  EXPECT_THAT(result.out, ::testing::Not(HasSubstr("[rank1]: pi")));
  EXPECT_THAT(result.out, HasSubstr("[rank1]: process 1 of 2 integrated 500000 intervals"));
}

TEST(Rendezvous, UnreachableMasterFailsWithinTheTimeout) {
  auto result = run_program({kProbe, "connect"}, rank_env(1, 2, free_port(), "1"), 20s);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_FALSE(result.timed_out);
  EXPECT_THAT(result.err, HasSubstr("rank 1: could not reach the rendezvous store at 127.0.0.1:"));
  EXPECT_LT(result.elapsed, 5s);
}

TEST(Rendezvous, PortInUseIsNamed) {
  ListeningSocket taken;
  auto result = run_program({kProbe, "connect"}, rank_env(0, 2, taken.port(), "2"), 20s);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.err, HasSubstr("cannot host the rendezvous store on 127.0.0.1:" +
                                    std::to_string(taken.port()) + ": address already in use"));
  EXPECT_LT(result.elapsed, 5s);
}

TEST(Rendezvous, RankThatNeverComesIsNamed) {
  auto result = run_program({kProbe, "connect"}, rank_env(0, 2, free_port(), "1.5"), 20s);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.err, HasSubstr("rendezvous of 2 ranks failed within 1.5 s"));
  EXPECT_THAT(result.err, HasSubstr("ranks that never arrived: 1"));
  EXPECT_LT(result.elapsed, 6s);
}

// Both ranks of a two-rank job of the probe in `mode`, where rank 1 leaves
// early; rank 0's result comes first.
struct TwoRanks {
  RunResult first;
  RunResult last;
  pid_t last_pid;
};
TwoRanks run_two_ranks(const std::string& mode, const std::string& timeout_s) {
  const int port = free_port();
  ChildProcess rank0({kProbe, mode}, rank_env(0, 2, port, timeout_s));
  ChildProcess rank1({kProbe, mode}, rank_env(1, 2, port, timeout_s));
  return TwoRanks{rank0.wait(90s), rank1.wait(20s), rank1.pid()};
}

TEST(Rendezvous, RankThatLeavesIsNamedByTheOthers) {
  const TwoRanks run = run_two_ranks("desert", "3");
  EXPECT_EQ(run.last.exit_code, 0) << run.last.err;
  EXPECT_EQ(run.first.exit_code, 1);
  EXPECT_THAT(run.first.err, HasSubstr("rank 0: barrier (collective #1) failed"));
  EXPECT_THAT(run.first.err, HasSubstr("never arrived (exited, hung, or busy elsewhere): 1"));
  EXPECT_LT(run.first.elapsed, 8s);
}

TEST(Rendezvous, RankThatExitsDuringASharedMemorySumIsNamedAtOnce) {
  // A minute's timeout: the exit must be noticed long before it.
  const TwoRanks run = run_two_ranks("vanish", "60");
  EXPECT_EQ(run.last.exit_code, 0) << run.last.err;
  EXPECT_EQ(run.first.exit_code, 1);
  EXPECT_THAT(run.first.err, HasSubstr("rank 1 (process " + std::to_string(run.last_pid) +
                                       ") exited during the test's sum"));
  EXPECT_LT(run.first.elapsed, 20s);
}

TEST(Rendezvous, BadVariablesAreOneLineErrors) {
  struct Case {
    ChildProcess::EnvironmentChanges env;
    std::string message;
  };
  std::vector<Case> cases = {
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE=0"},
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}}, "RANK=2"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "two"}}, "WORLD_SIZE expects a whole number, got 'two'"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}, "MASTER_PORT=70000"},
      {{{"ACCELERATE_TIMEOUT", "-1"}},
       "ACCELERATE_TIMEOUT expects a positive number of seconds (e.g. 300 or 2.5), got '-1'"},
  };
  for (const auto& c : cases) {
    auto result = run_program({kProbe, "connect"}, c.env, 10s);
    EXPECT_EQ(result.exit_code, 1) << c.message;
    EXPECT_THAT(result.err, HasSubstr(c.message));
    EXPECT_EQ(split_lines(result.err).size(), 1u) << result.err;
  }
}

}  // namespace
}  // namespace accelerate::testing
