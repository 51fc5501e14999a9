#include "launcher/port_check.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/free_port.h"
#include "launcher/launch_errors.h"

namespace accelerate::launcher {
namespace {

// Closes the socket on every path out.
class Socket {
 public:
  Socket() : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    if (fd_ < 0)
      throw LaunchFailure(std::string("cannot create a TCP socket: ") + std::strerror(errno));
  }
  ~Socket() { close(fd_); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

// Binds like the rendezvous store does (any address, SO_REUSEADDR so a port
// left in TIME_WAIT by a previous job does not count as taken). Returns errno.
int try_bind(const Socket& socket, int port) {
  int on = 1;
  setsockopt(socket.fd(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(socket.fd(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) return errno;
  return 0;
}

}  // namespace

bool port_is_free(int port) {
  Socket socket;
  return try_bind(socket, port) == 0;
}

void ensure_port_free(int port) {
  Socket socket;
  int error = try_bind(socket, port);
  if (error == EADDRINUSE) {
    throw LaunchFailure(
        "port " + std::to_string(port) +
        " is already in use on this machine (another job?); pass "
        "--main_process_port with a free port, or --main_process_port 0 to pick one");
  }
  if (error != 0) {
    throw LaunchFailure("cannot use port " + std::to_string(port) + ": " + std::strerror(error) +
                        "; pass --main_process_port with another port (0 picks a free one)");
  }
}

int pick_free_port() {
  if (auto port = pick_port_below_ephemeral_range()) return *port;
  Socket socket;
  int error = try_bind(socket, 0);
  sockaddr_in address{};
  socklen_t length = sizeof(address);
  if (error != 0 || getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw LaunchFailure(std::string("cannot find a free port: ") +
                        std::strerror(error ? error : errno) +
                        "; pass --main_process_port with a fixed port");
  }
  return ntohs(address.sin_port);
}

}  // namespace accelerate::launcher
