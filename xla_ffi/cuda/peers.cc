#include "cuda/peers.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "collectives/kinds.h"
#include "common/call_sites.h"
#include "common/dtype.h"
#include "common/process.h"
#include "common/reduce.h"
#include "common/text.h"
#include "cuda/stopped_context.h"

namespace jaccl::cuda {
namespace {

constexpr size_t kHeaderAlign = 256;

struct Registry {
  std::mutex mutex;
  std::map<int, std::unique_ptr<LocalDevice>> locals;  // by CUDA ordinal
  std::map<int64_t, Peer> peers;                       // by global device id, locals included
  std::map<int, int> peer_pids;                        // process index -> pid (other processes)
  std::set<std::pair<int64_t, int64_t>> readable;      // (local device, peer device)
  std::set<std::pair<int64_t, int64_t>> reachable;     // both ways, agreed by every process
  uint8_t* dead_host = nullptr;                        // per process, mapped
  uint8_t* dead_device = nullptr;
  uint64_t timeout_ns = 0;
  std::set<int64_t> reported;
  bool watching = false;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: the watcher may outlive main()
  return *r;
}

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("jaccl: ") + what + ": " + cudaGetErrorString(err));
  }
}

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Lays out flags, descriptor and staging data in one allocation.
Workspace lay_out(char* base, int64_t world_devices, size_t data_bytes) {
  Workspace w;
  const size_t flag_bytes = round_up(static_cast<size_t>(world_devices) * sizeof(uint64_t), kHeaderAlign);
  w.flags = reinterpret_cast<uint64_t*>(base);
  w.descriptor = reinterpret_cast<uint64_t*>(base + flag_bytes);
  w.abort = reinterpret_cast<int64_t*>(base + flag_bytes + kHeaderAlign / 2);
  w.data = base + flag_bytes + kHeaderAlign;
  w.data_bytes = data_bytes;
  return w;
}

size_t workspace_bytes(int64_t world_devices, size_t data_bytes) {
  return round_up(static_cast<size_t>(world_devices) * sizeof(uint64_t), kHeaderAlign) +
         kHeaderAlign + data_bytes;
}

std::string describe_call(const volatile uint64_t* d) {
  const uint64_t w0 = d[0];
  const auto kind = static_cast<CollectiveKind>(w0 & 0xff);
  std::string s = text(kind_name(kind), " of ", dtype_name(static_cast<Dtype>((w0 >> 8) & 0xff)));
  const uint64_t w[8] = {w0, d[1], d[2], d[3], d[4], d[5], d[6], d[7]};
  if (kind == CollectiveKind::kMoeDispatch || kind == CollectiveKind::kMoeCombine) {
    // Words of peer_moe.cc's descriptor.
    append(s, " rows [", w[1], " x ", w[2], " B] (", ((w0 >> 24) & 1) ? "pair dot, " : "",
           "lists ", w[3], "/", w[4], ", ", w[5], " output rows, k ", w[7]);
  } else {
    append(s, "[", w[1], "] -> [", w[2], "] (", op_shown(kind, (w0 >> 16) & 0xff),
           ((w0 >> 24) & 1) ? "one-shot, " : "", "chunk of ", w[7], " at ", w[5]);
  }
  append(s, ", group ", hex(w[6]), ")");
  append(s, at_site(static_cast<uint32_t>(w0 >> 32)));
  return s;
}

// "process P (pid N)" for the process of global device `device`, as far as the registry knows.
// Call with r.mutex held.
std::string describe_process(const Registry& r, int64_t device) {
  auto peer = r.peers.find(device);
  if (peer == r.peers.end()) return "its process";
  auto pid = r.peer_pids.find(peer->second.process);
  return pid == r.peer_pids.end() ? text("process ", peer->second.process)
                                  : text("process ", peer->second.process, " (pid ", pid->second, ")");
}

// "; process P (pid N) died" for every peer process the watcher saw die but `except` (the
// process of a peer that failed first: it may have exited since, which is not news). Call with
// r.mutex held.
std::string dead_peers(const Registry& r, int64_t except) {
  auto failed_first = r.peers.find(except);
  std::string out;
  for (const auto& [process, pid] : r.peer_pids) {
    if (failed_first != r.peers.end() && failed_first->second.process == process) continue;
    if (r.dead_host != nullptr && r.dead_host[process]) append(out, "; process ", process, " (pid ", pid, ") died");
  }
  return out;
}

// Call with registry().mutex held.
std::string describe_failure(const LocalDevice& local, const DeviceStatus& st) {
  const Registry& r = registry();
  const int64_t device = st.device;
  const int32_t rank = st.rank;
  std::string s = text("jaccl: GPU collective on device ", local.device, " failed: ");
  switch (st.error) {
    case kPeerTimeout:
      append(s, "timed out after ", r.timeout_ns / 1e9, " s waiting for device ", device,
             " (group rank ", rank, "); raise JACCL_TIMEOUT if it is only slow");
      break;
    case kPeerDead:
      append(s, describe_process(r, device), ", the process of device ", device, " (group rank ",
             rank, "), died");
      break;
    case kPeerBadExpert:
      append(s, "moe_dispatch: expert id ", device, " at flat index ", rank,
             " of topk_idx is out of range [-1, ", static_cast<uint64_t>(st.mine[0]), ")");
      break;
    case kPeerAborted:
      append(s, "device ", device, " of the group, on ", describe_process(r, device),
             ", failed first and printed why", dead_peers(r, device));
      break;
    case kPeerMismatch:
      append(s, "ranks disagree: device ", local.device, " runs ", describe_call(st.mine),
             " but device ", device, " (group rank ", rank, ") runs ", describe_call(st.theirs));
      break;
    default:
      append(s, "unknown failure ", static_cast<int32_t>(st.error));
  }
  return s;
}

// Why `local` failed, "" while it has not. What the device's own kernel recorded comes first:
// a barrier that fails writes its reason and traps, and the host thread still enqueueing that
// call then sees only "unspecified launch failure" (mark_broken's reason). Call with
// registry().mutex held.
std::string why_failed(const LocalDevice& local) {
  if (local.status_host != nullptr && local.status_host->error != kPeerOk) {
    return describe_failure(local, *local.status_host);
  }
  if (!local.broken.empty()) {
    return text("jaccl: GPU collective on device ", local.device, " failed: ", local.broken);
  }
  return "";
}

// Marks peer processes that no longer exist: the barriers waiting on them fail at once.
// Call with r.mutex held.
void notice_dead_peers(Registry& r) {
  if (r.dead_host == nullptr) return;
  for (const auto& [process, pid] : r.peer_pids) {
    if (!r.dead_host[process] && !pid_alive(pid)) r.dead_host[process] = 1;
  }
}

// Why `local` failed, looking at the peer processes again first: a peer's abort is often the
// echo of a death that this process's watcher has not seen yet (it looks every 10 ms), and
// each survivor should name the dead process, not only the peer that noticed it first.
// "" while nothing failed. Call with r.mutex held.
std::string why_failed_now(Registry& r, const LocalDevice& local) {
  if (why_failed(local).empty()) return "";
  notice_dead_peers(r);
  return why_failed(local);
}

// Call with r.mutex held: prints each device's failure once.
void report_locked(Registry& r) {
  for (const auto& [ordinal, local] : r.locals) {
    if (r.reported.count(local->device) != 0) continue;
    const std::string why = why_failed_now(r, *local);
    if (!why.empty()) {
      r.reported.insert(local->device);
      std::fprintf(stderr, "%s\n", why.c_str());
      std::fflush(stderr);
      end_after_stopped_context(local->device);
    }
  }
}

// Every 10 ms: mark dead peer processes and print each device's failure once.
void watch() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    notice_dead_peers(r);
    report_locked(r);
  }
}

// Call with r.mutex held.
void ensure_shared_state(Registry& r, int world_processes, double timeout_s) {
  if (r.dead_host == nullptr) {
    void* p = nullptr;
    check(cudaHostAlloc(&p, std::max(world_processes, 1), cudaHostAllocMapped | cudaHostAllocPortable),
          "mapped host memory for the peer list");
    std::memset(p, 0, std::max(world_processes, 1));
    r.dead_host = static_cast<uint8_t*>(p);
    void* d = nullptr;
    check(cudaHostGetDevicePointer(&d, p, 0), "device view of the peer list");
    r.dead_device = static_cast<uint8_t*>(d);
  }
  // Clamped: 1 ms .. about 30 years (JACCL_TIMEOUT=inf means "never", in practice).
  r.timeout_ns = static_cast<uint64_t>(std::min(std::max(timeout_s, 1e-3), 1e9) * 1e9);
  if (!r.watching) {
    std::thread(watch).detach();
    r.watching = true;
  }
}

// Makes `ordinal` current for the scope. The previous device is restored only if it is one of
// this process's devices: setting any other would create a CUDA context on a GPU the process
// does not use. Call with r.mutex held.
class CurrentDevice {
 public:
  CurrentDevice(const Registry& r, int ordinal) : registry_(r) {
    if (cudaGetDevice(&saved_) != cudaSuccess) saved_ = -1;
    check(cudaSetDevice(ordinal), "cudaSetDevice");
  }
  ~CurrentDevice() {
    if (saved_ >= 0 && registry_.locals.count(saved_)) cudaSetDevice(saved_);
  }

 private:
  const Registry& registry_;
  int saved_ = -1;
};

}  // namespace

std::pair<std::string, std::string> create_workspace(int ordinal, int64_t device, int process,
                                                     int64_t world_devices, int world_processes,
                                                     size_t data_bytes, double timeout_s) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.locals.count(ordinal)) throw std::runtime_error("jaccl: workspace created twice");
  if (data_bytes < (size_t{1} << 20)) throw std::runtime_error("jaccl: workspace below 1 MiB");
  CurrentDevice current(r, ordinal);
  ensure_shared_state(r, world_processes, timeout_s);
  auto local = std::make_unique<LocalDevice>();
  local->ordinal = ordinal;
  local->device = device;
  local->barriers.assign(static_cast<size_t>(world_devices), 0);
  void* base = nullptr;
  check(cudaMalloc(&base, workspace_bytes(world_devices, data_bytes)), "cudaMalloc (workspace)");
  local->workspace = lay_out(static_cast<char*>(base), world_devices, data_bytes);
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaMemsetAsync(base, 0, workspace_bytes(world_devices, 0), stream), "cudaMemset");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  cudaStreamDestroy(stream);
  void* status = nullptr;
  check(cudaHostAlloc(&status, sizeof(DeviceStatus), cudaHostAllocMapped | cudaHostAllocPortable),
        "mapped host memory for the device status");
  std::memset(status, 0, sizeof(DeviceStatus));
  local->status_host = static_cast<DeviceStatus*>(status);
  void* status_device = nullptr;
  check(cudaHostGetDevicePointer(&status_device, status, 0), "device view of the status");
  local->status_device = static_cast<DeviceStatus*>(status_device);
  cudaIpcMemHandle_t handle;
  check(cudaIpcGetMemHandle(&handle, base), "cudaIpcGetMemHandle");
  char bus[32] = {};
  check(cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal), "cudaDeviceGetPCIBusId");
  r.peers[device] = Peer{local->workspace, process};
  r.readable.insert({device, device});
  r.locals[ordinal] = std::move(local);
  return {std::string(reinterpret_cast<const char*>(&handle), sizeof handle), std::string(bus)};
}

bool open_peer(int64_t device, int process, int pid, const std::string& handle,
               const std::string& bus_id, size_t data_bytes, std::string* why) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.locals.empty()) {
    *why = "no local GPU workspace";
    return false;
  }
  const LocalDevice& first = *r.locals.begin()->second;
  if (data_bytes != first.workspace.data_bytes) {
    *why = "its staging area has " + std::to_string(data_bytes) + " bytes, this process's " +
           std::to_string(first.workspace.data_bytes) + " (set the same JACCL_CUDA_BUFFER_MB everywhere)";
    return false;
  }
  int owner = -1;  // the peer's GPU as this process numbers it, if visible
  if (cudaDeviceGetByPCIBusId(&owner, bus_id.c_str()) != cudaSuccess) {
    cudaGetLastError();
    owner = -1;
  }
  if (handle.empty()) {  // a device of this process: its workspace is already registered
    if (!r.peers.count(device)) {
      *why = "no workspace for that device in this process";
      return false;
    }
    // Local devices read each other through peer access.
    for (const auto& [ordinal, local] : r.locals) {
      int can = ordinal == owner;
      if (!can && owner >= 0 && cudaDeviceCanAccessPeer(&can, ordinal, owner) != cudaSuccess) can = 0;
      if (can && ordinal != owner) {
        CurrentDevice current(r, ordinal);
        cudaError_t err = cudaDeviceEnablePeerAccess(owner, 0);
        if (err == cudaErrorPeerAccessAlreadyEnabled) err = cudaSuccess;
        cudaGetLastError();
        can = err == cudaSuccess;
      }
      if (can) r.readable.insert({local->device, device});
    }
    return true;
  }
  if (handle.size() != sizeof(cudaIpcMemHandle_t)) {
    *why = "malformed IPC handle";
    return false;
  }
  // A handle opens once per process, into the current device's context (the first local
  // device); the driver enables peer access to the owner lazily. Only that device reads it
  // (groups of this process's other GPUs with that peer are staged).
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof h);
  void* base = nullptr;
  {
    CurrentDevice current(r, first.ordinal);
    cudaError_t err = cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
      cudaGetLastError();
      *why = std::string("cudaIpcOpenMemHandle: ") + cudaGetErrorString(err);
      return false;
    }
  }
  const int64_t world_devices = static_cast<int64_t>(first.barriers.size());
  r.peers[device] = Peer{lay_out(static_cast<char*>(base), world_devices, data_bytes), process};
  r.peer_pids[process] = pid;
  r.readable.insert({first.device, device});
  return true;
}

std::vector<std::pair<int64_t, int64_t>> readable_pairs() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return {r.readable.begin(), r.readable.end()};
}

void set_reachable(const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::set<std::pair<int64_t, int64_t>> one_way(pairs.begin(), pairs.end());
  r.reachable.clear();
  for (const auto& [a, b] : one_way) {
    if (one_way.count({b, a})) r.reachable.insert({a, b});
  }
}

bool any_failure() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  report_locked(r);
  for (const auto& [ordinal, local] : r.locals) {
    if (local->status_host->error != kPeerOk || !local->broken.empty()) return true;
  }
  return false;
}

LocalDevice* local_device(int ordinal) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto found = r.locals.find(ordinal);
  return found == r.locals.end() ? nullptr : found->second.get();
}

const Peer* peer(int64_t device) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto found = r.peers.find(device);
  return found == r.peers.end() ? nullptr : &found->second;
}

bool reachable(int64_t a, int64_t b) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return a == b ? r.reachable.count({a, a}) > 0 : r.reachable.count({a, b}) > 0;
}

uint64_t timeout_ns() { return registry().timeout_ns; }

const volatile uint8_t* dead_processes() { return registry().dead_device; }

std::string failure(const LocalDevice& device) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::string why = why_failed_now(r, device);
  if (!why.empty()) report_locked(r);
  return why;
}

void mark_broken(LocalDevice& device, const std::vector<int64_t>& members, const std::string& why) {
  // A stream of its own: the legacy default stream would wait for XLA's work (our barriers).
  const int64_t value = device.device + 1;
  cudaStream_t stream;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess) {
    for (int64_t m : members) {  // this device's own word too: its queued barriers stop
      const Peer* p = peer(m);
      if (p != nullptr) cudaMemcpyAsync(p->workspace.abort, &value, sizeof value, cudaMemcpyDefault, stream);
    }
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }
  cudaGetLastError();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (device.broken.empty()) device.broken = why;
}

}  // namespace jaccl::cuda
