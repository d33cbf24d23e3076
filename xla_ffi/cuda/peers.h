// The peer registry of _jaccl_cuda: one workspace per local GPU (barrier flags, the call
// descriptor, a staging area), exported through CUDA IPC and opened by every other process
// of the host; which device pairs can read each other; and a watcher thread that notices
// dead peer processes and reports failed barriers.
//
// Contract: set up from Python at bootstrap (create_workspace for each local GPU, then
// open_peer for every GPU of the host, then set_reachable with the pairs that every process
// could open both ways, so the choice of path is the same on every rank). The handler side
// (local_device, peer, reachable, failure) only reads after that. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cuda/kernels/peer_kernels.h"

namespace jaccl::cuda {

// A device's workspace, as mapped in this process.
struct Workspace {
  uint64_t* flags = nullptr;       // flags[g]: barriers global device g has signalled here
  uint64_t* descriptor = nullptr;  // the call descriptor of the device's current call
  int64_t* abort = nullptr;        // 1 + the device of a peer that failed first, else 0
  char* data = nullptr;            // staging area that the group reads
  size_t data_bytes = 0;
};

struct LocalDevice {
  int ordinal = 0;
  int64_t device = 0;                    // global device id
  Workspace workspace;
  DeviceStatus* status_host = nullptr;   // mapped: written by failing barriers
  DeviceStatus* status_device = nullptr;
  std::mutex mutex;                      // held while a collective is enqueued
  std::vector<uint64_t> barriers;        // per peer global device id: barriers run with it
  std::string broken;                    // why the host could not enqueue a peer collective
};

struct Peer {
  Workspace workspace;
  int process = 0;
};

// Python side. create_workspace returns the IPC handle and PCI bus id of the new workspace.
std::pair<std::string, std::string> create_workspace(int ordinal, int64_t device, int process,
                                                     int64_t world_devices, int world_processes,
                                                     size_t data_bytes, double timeout_s);
// Maps another device's workspace (from this process: `handle` empty). Returns false, with
// the reason in *why, when this process cannot read it or its staging size differs.
bool open_peer(int64_t device, int process, int pid, const std::string& handle,
               const std::string& bus_id, size_t data_bytes, std::string* why);
// (local device, peer device) pairs this process can read, itself included.
std::vector<std::pair<int64_t, int64_t>> readable_pairs();
void set_reachable(const std::vector<std::pair<int64_t, int64_t>>& pairs);
// Prints every failure not printed yet (the watcher prints them too, within 10 ms); returns
// whether any local device failed.
bool any_failure();

// Handler side.
LocalDevice* local_device(int ordinal);
const Peer* peer(int64_t device);
bool reachable(int64_t a, int64_t b);  // a and b read each other
uint64_t timeout_ns();
const volatile uint8_t* dead_processes();  // device view, per process index
std::string failure(const LocalDevice& device);  // "" while nothing failed
// The host could not enqueue a peer collective (its barrier counts are off): the device
// refuses the peer path from now on, and the group's peers are told to stop.
void mark_broken(LocalDevice& device, const std::vector<int64_t>& members, const std::string& why);

}  // namespace jaccl::cuda
