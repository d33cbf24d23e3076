// Thin, error-checked wrappers over BSD sockets for the TCP transport.
//
// Contract: every function throws jaccl::Error (kInternal or kTimeout) with the address and
// errno in the message; blocking helpers take an absolute deadline and never wait past it.
#pragma once

#include <cstddef>
#include <string>

#include "common/clock.h"

namespace jaccl::tcp {

struct Endpoint {
  std::string host;
  int port = 0;
  std::string str() const { return host + ":" + std::to_string(port); }
  static Endpoint parse(const std::string& text);  // "a.b.c.d:port"
};

// A listening socket bound to `ip` (port 0 picks a free one), non-blocking.
int listen_on(const std::string& ip, int port, int* bound_port);

// Connects to `to` before the deadline, retrying while the peer is not listening yet.
int connect_to(const Endpoint& to, const Deadline& deadline);

void set_nonblocking(int fd, bool on);
// TCP_NODELAY, keep-alive, and TCP_USER_TIMEOUT so a dead link fails within `timeout_s`.
void tune(int fd, double timeout_s);

// Blocking exact-size I/O on a blocking socket, bounded by the deadline.
void read_exact(int fd, void* data, size_t bytes, const Deadline& deadline, const char* what);
void write_exact(int fd, const void* data, size_t bytes, const Deadline& deadline, const char* what);

// The address of the local interface called `ifname` (JACCL_IFNAME).
std::string interface_address(const std::string& ifname);
// The local address the kernel would use to reach `host` (the default interface).
std::string address_towards(const std::string& host);

}  // namespace jaccl::tcp
