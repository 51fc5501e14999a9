#include "compat/tcp_store_client.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include <c10/util/Exception.h>

#include "accelerate_compat_config.h"
#include "common/mutex.h"

namespace accelerate {
namespace compat {
namespace {

using Clock = std::chrono::steady_clock;
using Bytes = std::vector<uint8_t>;

enum class Query : uint8_t {
  kValidate = 0,
  kSet = 1,
  kCompareSet = 2,
  kGet = 3,
  kAdd = 4,
  kCheck = 5,
  kWait = 6,
  kGetNumKeys = 7,
  kDeleteKey = 8,
  kCancelWait = 12,
  kPing = 13,
};
constexpr uint32_t kValidationMagic = 0x3C85F7CE;
constexpr uint8_t kReady = 0;         // CHECK's answer
constexpr uint8_t kStopWaiting = 0;   // WAIT's answer
constexpr uint8_t kWaitCanceled = 1;  // CANCEL_WAIT's answer
// TCPStore's clients put this before every key; a PyTorch process sharing
// the store must find our keys where its own client would.
constexpr char kKeyPrefix[] = "/";
// A 2.x server answers the handshake at once; an older one never does (it
// reads the handshake as the start of another request). Waiting the whole
// store timeout (minutes) for that would only delay the error.
constexpr std::chrono::milliseconds kHandshakeTimeout = std::chrono::seconds(30);

[[noreturn]] void fail(const std::string& what) { TORCH_CHECK(false, what); }

std::string where(const std::string& host, int port) { return host + ":" + std::to_string(port); }

// One request, built whole and sent in one write.
class Request {
 public:
  explicit Request(Query query) { bytes_.push_back(static_cast<uint8_t>(query)); }
  Request& u32(uint32_t value) { return little_endian(value, 4); }
  Request& u64(uint64_t value) { return little_endian(value, 8); }
  Request& i64(int64_t value) { return u64(static_cast<uint64_t>(value)); }
  Request& text(const std::string& value) {
    u64(value.size());
    bytes_.insert(bytes_.end(), value.begin(), value.end());
    return *this;
  }
  Request& bytes(const Bytes& value) {
    u64(value.size());
    bytes_.insert(bytes_.end(), value.begin(), value.end());
    return *this;
  }
  Request& keys(const std::vector<std::string>& names) {
    u64(names.size());
    for (const auto& name : names) text(kKeyPrefix + name);
    return *this;
  }
  const Bytes& wire() const { return bytes_; }

 private:
  Request& little_endian(uint64_t value, int width) {
    for (int i = 0; i < width; ++i) bytes_.push_back(static_cast<uint8_t>(value >> (8 * i)));
    return *this;
  }
  Bytes bytes_;
};

// A connected socket whose every read has a deadline.
class Socket {
 public:
  Socket(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}
  ~Socket() { ::close(fd_); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  static std::unique_ptr<Socket> connect(const std::string& host, int port,
                                         std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    std::string last_error = "no address";
    while (true) {
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* found = nullptr;
      const int resolved =
          ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
      if (resolved != 0) {
        last_error = std::string("cannot resolve the host: ") + ::gai_strerror(resolved);
      }
      for (addrinfo* a = resolved == 0 ? found : nullptr; a != nullptr; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          ::freeaddrinfo(found);
          const int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          return std::make_unique<Socket>(fd, where(host, port));
        }
        last_error = std::strerror(errno);
        ::close(fd);
      }
      if (found != nullptr) ::freeaddrinfo(found);
      // The server may not listen yet (a worker started before its store):
      // try again until the deadline, as TCPStore's client does.
      if (Clock::now() >= deadline) {
        fail("could not connect to the store at " + where(host, port) + " within " +
             std::to_string(timeout.count()) + " ms: " + last_error);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  void send(const Request& request) {
    const Bytes& wire = request.wire();
    std::size_t sent = 0;
    while (sent < wire.size()) {
      const ssize_t n = ::send(fd_, wire.data() + sent, wire.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("the store at " + peer_ + " failed a write: " + std::strerror(errno));
      sent += static_cast<std::size_t>(n);
    }
  }

  // Fills `data` with `size` bytes; false when the deadline passed first.
  bool receive(void* data, std::size_t size, Clock::time_point deadline) {
    auto* out = static_cast<uint8_t*>(data);
    while (size > 0) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd ready{fd_, POLLIN, 0};
      const int polled =
          ::poll(&ready, 1, static_cast<int>(std::min<int64_t>(left.count(), 60000)));
      if (polled < 0 && errno == EINTR) continue;
      if (polled < 0) fail("waiting on the store at " + peer_ + " failed: " + std::strerror(errno));
      if (polled == 0) continue;
      const ssize_t n = ::recv(fd_, out, size, 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n < 0) fail("the store at " + peer_ + " failed a read: " + std::strerror(errno));
      if (n == 0) fail("the store at " + peer_ + " closed the connection");
      out += n;
      size -= static_cast<std::size_t>(n);
    }
    return true;
  }

  const std::string& peer() const { return peer_; }

 private:
  int fd_;
  std::string peer_;
};

class Torch2StoreClient final : public c10d::Store {
 public:
  Torch2StoreClient(std::string host, int port, std::chrono::milliseconds timeout)
      : c10d::Store(timeout), host_(std::move(host)), port_(port) {
    socket_ = Socket::connect(host_, port_, timeout);
    handshake(std::min(timeout, kHandshakeTimeout));
  }

#if ACCELERATE_COMPAT_STORE_CLONE
  c10::intrusive_ptr<c10d::Store> clone() override {
    return c10::make_intrusive<Torch2StoreClient>(host_, port_, timeout_);
  }
#endif

  void set(const std::string& key, const Bytes& value) override {
    detail::MutexLock lock(mutex_);
    socket_->send(Request(Query::kSet).text(kKeyPrefix + key).bytes(value));
  }

  Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    detail::MutexLock lock(mutex_);
    socket_->send(
        Request(Query::kCompareSet).text(kKeyPrefix + key).bytes(expected).bytes(desired));
    return receive_bytes("compare_set");
  }

  Bytes get(const std::string& key) override {
    detail::MutexLock lock(mutex_);
    wait_locked({key}, timeout_);
    socket_->send(Request(Query::kGet).text(kKeyPrefix + key));
    return receive_bytes("get");
  }

  int64_t add(const std::string& key, int64_t value) override {
    detail::MutexLock lock(mutex_);
    socket_->send(Request(Query::kAdd).text(kKeyPrefix + key).i64(value));
    return static_cast<int64_t>(receive_u64("add"));
  }

  bool deleteKey(const std::string& key) override {
    detail::MutexLock lock(mutex_);
    socket_->send(Request(Query::kDeleteKey).text(kKeyPrefix + key));
    return receive_u64("delete_key") == 1;
  }

  bool check(const std::vector<std::string>& keys) override {
    detail::MutexLock lock(mutex_);
    socket_->send(Request(Query::kCheck).keys(keys));
    return receive_u8("check") == kReady;
  }

  int64_t getNumKeys() override {
    detail::MutexLock lock(mutex_);
    socket_->send(Request(Query::kGetNumKeys));
    return static_cast<int64_t>(receive_u64("num_keys"));
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    detail::MutexLock lock(mutex_);
    wait_locked(keys, timeout);
  }

 private:
  // An older PyTorch's server reads the handshake as the start of another
  // request: it then waits for more bytes, or drops the connection.
  void handshake(std::chrono::milliseconds timeout) {
    const uint32_t nonce = static_cast<uint32_t>(::getpid());
    const std::string refused = "the store at " + socket_->peer() +
                                " did not answer PyTorch 2.x's handshake within " +
                                std::to_string(timeout.count()) + " ms";
    const std::string hint = " (is it an older PyTorch's store?)";
    uint8_t echo[4];
    bool answered = false;
    try {
      socket_->send(Request(Query::kValidate).u32(kValidationMagic));
      socket_->send(Request(Query::kPing).u32(nonce));
      answered = socket_->receive(echo, sizeof echo, Clock::now() + timeout);
    } catch (const c10::Error& cause) {
      fail(refused + ": " + cause.what_without_backtrace() + hint);
    }
    if (!answered) fail(refused + hint);
    if (decode(echo, 4) != nonce) fail(refused + ": it answered another value" + hint);
  }

  void wait_locked(const std::vector<std::string>& keys, std::chrono::milliseconds timeout)
      REQUIRES(mutex_) {
    socket_->send(Request(Query::kWait).keys(keys));
    uint8_t answer = 0;
    if (socket_->receive(&answer, 1, Clock::now() + timeout)) {
      expect(answer == kStopWaiting, "wait");
      return;
    }
    // Withdraw the wait, so that the connection stays in step: the server
    // answers WAIT_CANCELED, after a STOP_WAITING if the keys came meanwhile.
    socket_->send(Request(Query::kCancelWait));
    answer = receive_u8("cancel_wait");
    if (answer == kStopWaiting) {
      expect(receive_u8("cancel_wait") == kWaitCanceled, "cancel_wait");
      return;
    }
    expect(answer == kWaitCanceled, "cancel_wait");
    std::string names;
    for (const auto& key : keys) names += (names.empty() ? "" : ", ") + key;
    fail("wait timeout after " + std::to_string(timeout.count()) + " ms for keys " + names +
         " in the store at " + socket_->peer());
  }

  void expect(bool fine, const char* operation) {
    if (!fine) {
      fail(std::string("the store at ") + socket_->peer() + " answered " + operation +
           " with an unexpected value");
    }
  }

  void receive_exactly(void* data, std::size_t size, const char* operation) {
    if (!socket_->receive(data, size, Clock::now() + timeout_)) {
      fail(std::string("the store at ") + socket_->peer() + " did not answer " + operation +
           " within " + std::to_string(timeout_.count()) + " ms");
    }
  }

  static uint64_t decode(const uint8_t* bytes, int width) {
    uint64_t value = 0;
    for (int i = 0; i < width; ++i) value |= static_cast<uint64_t>(bytes[i]) << (8 * i);
    return value;
  }

  uint8_t receive_u8(const char* operation) {
    uint8_t value = 0;
    receive_exactly(&value, 1, operation);
    return value;
  }

  uint64_t receive_u64(const char* operation) {
    uint8_t bytes[8];
    receive_exactly(bytes, sizeof bytes, operation);
    return decode(bytes, 8);
  }

  Bytes receive_bytes(const char* operation) {
    Bytes value(receive_u64(operation));
    if (!value.empty()) receive_exactly(value.data(), value.size(), operation);
    return value;
  }

  const std::string host_;
  const int port_;
  detail::Mutex mutex_;
  std::unique_ptr<Socket> socket_;  // requests and answers alternate under mutex_
};

}  // namespace

c10::intrusive_ptr<c10d::Store> connect_torch2_store(const std::string& host, int port,
                                                     std::chrono::milliseconds timeout) {
  return c10::make_intrusive<Torch2StoreClient>(host, port, timeout);
}

}  // namespace compat
}  // namespace accelerate
