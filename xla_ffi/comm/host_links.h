// The links between this process's devices and the devices of other hosts: one TCP link per
// pair (jaccl's TCP transport, transport/tcp/), which carries the pair's frames, or, with
// WorldConfig::network kOfi, only their control (aborts, goodbyes, eviction requests) beside
// libfabric's data network (transport/network.h), which then carries the frames.
//
// Contract: the World makes one when it is created, after its shared memory (the doorbells),
// from its config (which outlives this), its TCP transport (null in a job of one host) and
// what it knows of the topology (Topology). Before connect(), every process publishes
// local_info() and adds every other's with add_peer() (libfabric's addresses: "" and nothing
// without a data network). connect() connects every link within the config's timeout and
// returns the channel of each direction of each pair; a peer's eviction request, read on the
// TCP transport's I/O thread, goes to `on_eviction_request`. tcp() is null where there is no
// TCP transport. The destructor lets frames in flight over the data network land (at most
// the timeout, 30 s), then closes it, then TCP.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/world_config.h"
#include "transport/doorbell.h"
#include "transport/network.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"

namespace jaccl {

class HostLinks {
 public:
  struct Topology {
    std::vector<std::pair<int64_t, int64_t>> pairs;  // (local device, device of another host)
    std::function<int(int64_t device)> process_of;
    std::function<std::string(int process)> process_name;  // "process P", as errors say
    std::function<Doorbell*(int64_t device)> doorbell;     // a local device's
  };
  struct Link {
    int64_t src, dst;
    Channel* channel;
  };
  using EvictionHandler = tcp::TcpTransport::EvictionHandler;

  HostLinks(const WorldConfig& config, std::unique_ptr<tcp::TcpTransport> tcp, Topology topology);
  ~HostLinks();
  HostLinks(const HostLinks&) = delete;
  HostLinks& operator=(const HostLinks&) = delete;

  std::string local_info() const;
  void add_peer(int process, const std::string& info);
  std::vector<Link> connect(const EvictionHandler& on_eviction_request);
  tcp::TcpTransport* tcp() const { return tcp_.get(); }

 private:
  void open_data_network();

  const WorldConfig& config_;
  Topology topology_;
  std::unique_ptr<tcp::TcpTransport> tcp_;
  std::unique_ptr<DataNetwork> data_;  // WorldConfig::network kOfi: the frames between hosts
};

}  // namespace jaccl
