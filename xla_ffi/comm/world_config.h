// What a process knows about the job when the engine starts: every process,
// every device, and the engine settings all processes must share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace jaccl {

struct ProcessInfo {
  int index = 0;
  int pid = 0;
  std::string host;  // processes with equal `host` share memory
  // jax.process_index() of the process, which messages name it by: the world's index until
  // a world over the survivors of a lost process renumbers them (-1: the index).
  int jax_index = -1;
};

// What carries the frames between hosts (JACCL_TRANSPORT, resolved by jax_jaccl/_transport.py):
// nothing (a job of one host), jaccl's TCP links, or libfabric's data network beside them
// (comm/host_links.h).
enum class Network { kNone, kTcp, kOfi };

struct DeviceInfo {
  int64_t id = 0;    // XLA's global device id (what DeviceOrdinal reports)
  int process = 0;   // index into WorldConfig::processes
};

struct WorldConfig {
  int my_process = 0;
  std::vector<ProcessInfo> processes;
  std::vector<DeviceInfo> devices;
  std::string job_tag;          // names this job's shared-memory segments
  std::vector<std::string> endpoints;  // per process: "ip:port" of its TCP listener, or ""
  std::string secret;           // per-job secret (hex) that TCP connections prove
  int tcp_stripes = 2;          // sockets per TCP link (JACCL_TCP_SOCKETS)
  Network network = Network::kTcp;  // between hosts
  std::string ofi_provider;     // kOfi: the libfabric provider every process uses
  std::string ofi_why;          // why that transport and provider (for the INFO line)
  std::string ofi_mode = "auto";  // JACCL_OFI_MODE: write, message, or auto (write if it works)
  std::string ip;               // this process's address for other hosts (TCP listener's)
  size_t payload_bytes = 512 * 1024;  // per frame
  int num_slots = 4;            // frames in flight per channel
  double timeout_s = 120.0;     // JACCL_TIMEOUT
  int spin_us = 50;             // busy-wait before sleeping on a doorbell
  // Several streams per channel (transport/shared_channel.h): for jaccl's lanes (comm/lanes.h)
  // and for XLA's collectives with several CPU devices per process. A frame is copied only when
  // it waits at the head of its channel for a reader busy elsewhere.
  bool shared_channels = false;
  // XLA's collectives through the mpiabi library have streams of their own, one per communicator
  // (with several CPU devices per process, where two of the mpiabi library's communicators may use
  // one pair of devices at once; needs shared_channels). Otherwise they share lane 0's streams and
  // lock with jaccl's calls, which they then meet in one order (a rank that takes them in
  // another gets "ranks disagree").
  bool xla_streams = false;
  // JACCL_EVICT_STALLED: at a call's deadline, kill (SIGKILL) the processes of this host that
  // never reached the call, and ask those of other hosts it waits for to leave if they never
  // reached it (collectives/waiter.cc; this process honours such a request only when set): a
  // stalled process becomes a lost one, which JAX's heartbeat then declares dead and the
  // survivors can go on without (jaccl-run --keep-going sets it).
  bool evict_stalled = false;
};

}  // namespace jaccl
