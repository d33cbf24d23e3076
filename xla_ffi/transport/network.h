// A network transport that carries the frames of the channels between hosts, beside the TCP
// links (transport/tcp/) that then carry control only (aborts, goodbyes). Today there is one:
// libfabric's (transport/ofi/), chosen with JACCL_TRANSPORT=ofi; the TCP transport carries
// both when there is none.
//
// Contract (in the order its user calls it): local_info() is what this process tells the
// others (through the key-value store) so that they can reach it; add_peer() takes each
// other process's; start(control) begins moving frames, where control(local, remote) is the
// TCP channel between the same devices, whose failure() each data channel also reports;
// sender()/receiver() are the channels (transport/transport.h) between a local device and one
// of another host; drain() waits, at most until the deadline, until every frame sent was
// consumed, before the control links say goodbye. The destructor stops and closes everything.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/clock.h"
#include "transport/transport.h"

namespace jaccl {

class DataNetwork {
 public:
  virtual ~DataNetwork() = default;
  virtual std::string local_info() const = 0;
  virtual void add_peer(int process, const std::string& info) = 0;
  virtual void start(const std::function<const Channel*(int64_t local, int64_t remote)>& control) = 0;
  virtual Channel* sender(int64_t local_device, int64_t remote_device) = 0;
  virtual Channel* receiver(int64_t remote_device, int64_t local_device) = 0;
  virtual void drain(const Deadline& deadline) = 0;
};

}  // namespace jaccl
