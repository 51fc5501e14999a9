// compat::connect_torch2_store against the real thing: a TCPStore served by
// PyTorch 2.x (the reference venv's torch, $ACCELERATE_REFERENCE_PYTHON),
// with its libuv server (what torchrun's agent runs) and its classic one.
// The Python side reads what this client wrote through its own client, so
// keys and values must be where PyTorch puts them. An older PyTorch's store
// (Debian's torch 1.13 at /usr/bin/python3) must be refused with one clear
// line, not waited on forever.
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <c10/util/Exception.h>

#include "compat/tcp_store_client.h"
#include "support/process_runner.h"

namespace accelerate::testing {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

const std::string kServerScript = TORCH_STORE_SERVER_SCRIPT;

// The first line of what `fn` throws (the store throws c10::Error).
std::string error_message(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const c10::Error& error) {
    return error.what_without_backtrace();
  }
  return "(no error)";
}

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }
std::string text(const std::vector<uint8_t>& value) { return {value.begin(), value.end()}; }

// A PyTorch store server started for one test, and the port it listens on.
class StoreServer {
 public:
  StoreServer(const std::string& python, const std::string& kind)
      : port_file_(folder_.path() + "/port"), process_({python, kServerScript, port_file_, kind}) {}
  // The port, once the server wrote it; -1 if it never did.
  int port() {
    if (!wait_for_file(port_file_, 60s)) return -1;
    std::ifstream in(port_file_);
    int port = -1;
    in >> port;
    return port;
  }
  RunResult wait() { return process_.wait(60s); }

 private:
  TemporaryFolder folder_;
  std::string port_file_;
  ChildProcess process_;
};

std::string reference_python() {
  const char* python = std::getenv("ACCELERATE_REFERENCE_PYTHON");
  return python ? python : "";
}

class Torch2Store : public ::testing::TestWithParam<std::string> {};

TEST_P(Torch2Store, EveryOperationAgreesWithPyTorchsOwnClient) {
  const std::string python = reference_python();
  if (python.empty()) GTEST_SKIP() << "no Python reference (ACCELERATE_REFERENCE_PYTHON unset)";
  StoreServer server(python, GetParam());
  const int port = server.port();
  ASSERT_GT(port, 0) << server.wait().err;
  auto store = compat::connect_torch2_store("127.0.0.1", port, 20s);

  // get waits for a key that another client sets.
  EXPECT_EQ(text(store->get("from_python")), "hello");
  store->set("from_cpp", bytes("cpp-value"));
  EXPECT_EQ(text(store->get("verdict")), "ok") << "PyTorch's client read another value";

  EXPECT_EQ(store->add("counter", 5), 5);
  EXPECT_EQ(store->add("counter", -2), 3);
  EXPECT_TRUE(store->check({"from_python", "from_cpp"}));
  EXPECT_FALSE(store->check({"from_python", "never_set"}));

  // compare_set: an absent key with an empty expectation is set; a wrong
  // expectation leaves the value and answers it.
  EXPECT_EQ(text(store->compareSet("cas", {}, bytes("first"))), "first");
  EXPECT_EQ(text(store->compareSet("cas", bytes("wrong"), bytes("second"))), "first");
  EXPECT_EQ(text(store->compareSet("cas", bytes("first"), bytes("second"))), "second");

  const int64_t keys = store->getNumKeys();
  EXPECT_TRUE(store->deleteKey("counter"));
  EXPECT_FALSE(store->deleteKey("counter"));
  EXPECT_EQ(store->getNumKeys(), keys - 1);

  // A wait that times out is withdrawn, and the connection stays in step.
  const auto started = std::chrono::steady_clock::now();
  EXPECT_THAT(error_message([&] { store->wait({"never_set"}, 300ms); }),
              HasSubstr("wait timeout after 300 ms for keys never_set"));
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
  EXPECT_EQ(text(store->get("cas")), "second");
  store->wait({"from_python", "cas"}, 1s);

  store->set("done", bytes("1"));
  const RunResult result = server.wait();
  EXPECT_EQ(result.exit_code, 0) << result.err;
}

INSTANTIATE_TEST_SUITE_P(ServerKinds, Torch2Store, ::testing::Values("libuv", "classic"));

TEST(Torch2StoreRefusal, AnOlderPyTorchsStoreIsOneClearErrorNotAHang) {
  const std::string python = "/usr/bin/python3";  // Debian's python3-torch 1.13
  struct stat info {};
  if (::stat(python.c_str(), &info) != 0 ||
      run_program({python, "-c", "import torch.distributed"}, {}, 60s).exit_code != 0) {
    GTEST_SKIP() << "no PyTorch 1.x at " << python;
  }
  StoreServer server(python, "old");
  const int port = server.port();
  ASSERT_GT(port, 0) << server.wait().err;
  const auto started = std::chrono::steady_clock::now();
  const std::string message =
      error_message([&] { compat::connect_torch2_store("127.0.0.1", port, 2s); });
  EXPECT_THAT(message, HasSubstr("did not answer PyTorch 2.x's handshake within 2000 ms"));
  EXPECT_LT(std::chrono::steady_clock::now() - started, 10s);
}

TEST(Torch2StoreRefusal, NothingListeningFailsAtTheTimeout) {
  const int port = free_loopback_port();
  const auto started = std::chrono::steady_clock::now();
  const std::string message =
      error_message([&] { compat::connect_torch2_store("127.0.0.1", port, 500ms); });
  EXPECT_THAT(message, HasSubstr("could not connect to the store at 127.0.0.1:" +
                                 std::to_string(port) + " within 500 ms"));
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
}

}  // namespace
}  // namespace accelerate::testing
