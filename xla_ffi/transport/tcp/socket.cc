#include "transport/tcp/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "common/error.h"

namespace jaccl::tcp {
namespace {

sockaddr_in to_sockaddr(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    addrinfo hints{}, *found = nullptr;
    hints.ai_family = AF_INET;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) {
      throw_error(ErrorKind::kInvalidArgument, "cannot resolve host '", host, "'");
    }
    addr.sin_addr = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
    freeaddrinfo(found);
  }
  return addr;
}

int remaining_ms(const Deadline& deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.end() - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

void wait_ready(int fd, short events, const Deadline& deadline, const char* what) {
  pollfd p{fd, events, 0};
  int n = poll(&p, 1, remaining_ms(deadline));
  if (n == 0) throw_error(ErrorKind::kTimeout, "timed out in ", what);
  if (n < 0 && errno != EINTR) throw_system_error(std::string("poll in ") + what);
}

}  // namespace

Endpoint Endpoint::parse(const std::string& text) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos) throw_error(ErrorKind::kInvalidArgument, "bad endpoint '", text, "'");
  return Endpoint{text.substr(0, colon), std::stoi(text.substr(colon + 1))};
}

int listen_on(const std::string& ip, int port, int* bound_port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw_system_error("socket");
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr = to_sockaddr(ip, port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    throw_system_error("bind " + ip + ":" + std::to_string(port));
  }
  if (listen(fd, 128) != 0) {
    close(fd);
    throw_system_error("listen");
  }
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *bound_port = ntohs(addr.sin_port);
  set_nonblocking(fd, true);
  return fd;
}

int connect_to(const Endpoint& to, const Deadline& deadline) {
  sockaddr_in addr = to_sockaddr(to.host, to.port);
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw_system_error("socket");
    set_nonblocking(fd, true);
    int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int n = poll(&p, 1, remaining_ms(deadline));
      int err = 0;
      socklen_t len = sizeof err;
      if (n > 0) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      rc = (n > 0 && err == 0) ? 0 : -1;
      errno = n == 0 ? ETIMEDOUT : err;
    }
    if (rc == 0) {
      set_nonblocking(fd, false);
      return fd;
    }
    int err = errno;
    close(fd);
    if (deadline.expired()) {
      throw_error(ErrorKind::kTimeout, "could not connect to ", to.str(), " within ",
                  deadline.seconds(), " s: ", std::strerror(err));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void set_nonblocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK);
}

void tune(int fd, double timeout_s) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  unsigned int user_timeout_ms = static_cast<unsigned int>(timeout_s * 1000);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

void read_exact(int fd, void* data, size_t bytes, const Deadline& deadline, const char* what) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    wait_ready(fd, POLLIN, deadline, what);
    ssize_t n = recv(fd, p, bytes, MSG_DONTWAIT);
    if (n == 0) throw_error(ErrorKind::kPeerFailure, "connection closed in ", what);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      throw_system_error(std::string("recv in ") + what);
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void write_exact(int fd, const void* data, size_t bytes, const Deadline& deadline, const char* what) {
  auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    wait_ready(fd, POLLOUT, deadline, what);
    ssize_t n = send(fd, p, bytes, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      throw_system_error(std::string("send in ") + what);
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

std::string interface_address(const std::string& ifname) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) throw_system_error("getifaddrs");
  std::string found, names;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    names += std::string(names.empty() ? "" : ", ") + a->ifa_name;
    if (ifname == a->ifa_name && found.empty()) {
      char text[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
      found = text;
    }
  }
  freeifaddrs(list);
  if (found.empty()) {
    throw_error(ErrorKind::kInvalidArgument, "JACCL_IFNAME=", ifname,
                " names no IPv4 interface here (have: ", names, ")");
  }
  return found;
}

std::string address_towards(const std::string& host) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw_system_error("socket");
  sockaddr_in addr = to_sockaddr(host, 9);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    throw_system_error("no route to " + host);
  }
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  char text[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &addr.sin_addr, text, sizeof text);
  return text;
}

}  // namespace jaccl::tcp
