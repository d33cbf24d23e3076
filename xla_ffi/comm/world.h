// The process-wide view of the job: who runs where, the memory shared with
// the other processes of this host, the channels between devices, and the
// abort board every process watches.
//
// Contract:
// - create() runs once per process (from Python's bootstrap), then
//   attach_peers() once every process of the host has created its segment,
//   then unlink_own_segment() once they have all attached. Between those steps
//   the bootstrap synchronises the processes through JAX's key-value store.
// - After attach_peers() the World is read-only except for the abort board
//   and the communicator cache, which are thread-safe; any device thread may
//   use it concurrently.
// - channel(src, dst) exists when at least one end is a local device and a
//   transport reaches the other; otherwise it throws naming both devices.
// - Channels to other hosts are HostLinks' (comm/host_links.h): with config.network kOfi
//   they go over libfabric (TCP links stay for control), and between create() and
//   attach_peers() every process publishes ofi_local_info() and adds every other's with
//   ofi_add_peer().
// - raise_abort() records the first failure of this process; check_health()
//   throws if this process or any listed peer has aborted or died.
// - With config.shared_channels, every communicator's member reads and writes streams of a
//   SharedChannel (transport/shared_channel.h) instead of the channel itself.
// - A device's call holds a World::Use while it runs; destroy() waits until no call uses the
//   world (each ends within its deadline), so an exit that races with device programs still
//   in flight never frees the world under them. A call that starts after destroy() finds none.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "comm/host_links.h"
#include "comm/lanes.h"
#include "comm/spaces.h"
#include "comm/world_config.h"
#include "transport/shm/host_memory.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"

namespace jaccl {

class Communicator;
class SharedChannel;

class World {
 public:
  // `network` (may be null) is this process's TCP listener, already announced to the others.
  static World& create(const WorldConfig& config, std::unique_ptr<tcp::TcpTransport> network);
  static World* get();
  static World& require();
  static void destroy();

  // Keeps the world alive while a call uses it; world() is null when there is none.
  class Use {
   public:
    Use();
    ~Use();
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;
    World* world() const { return world_; }

   private:
    World* world_;
  };

  ~World();

  void attach_peers();
  // "" when this process has no OFI transport (config.network kTcp, or one host).
  std::string ofi_local_info() const;
  void ofi_add_peer(int process, const std::string& info);
  void unlink_own_segment();
  const std::string& own_segment_name() const { return host_memory_.own_name(); }

  const WorldConfig& config() const { return config_; }
  int my_process() const { return config_.my_process; }
  const DeviceInfo& device(int64_t id) const;
  bool is_local(int64_t id) const { return device(id).process == config_.my_process; }
  bool same_host(int process) const;
  const std::string& host_of(int64_t id) const { return config_.processes[device(id).process].host; }
  std::string describe_device(int64_t id) const;
  // Whether process `reader` can read process `owner`'s memory in place (both of this host,
  // attached: transport/shm/single_copy.h); a process can always read its own.
  bool readable(int reader, int owner) const;
  // "process P" with P the process's jax.process_index() (ProcessInfo::jax_index).
  std::string process_name(int process) const;

  Channel* channel(int64_t src, int64_t dst) const;
  // With config.shared_channels, every communicator talks through streams of these (one per
  // channel): calls of several communicators may use one pair of devices at once.
  bool shares_channels() const { return config_.shared_channels; }
  // Whether the mpiabi library's communicators have streams of their own
  // (WorldConfig::xla_streams).
  bool xla_streams() const { return config_.shared_channels && config_.xla_streams; }
  SharedChannel* shared_channel(int64_t src, int64_t dst) const;
  // Held by every call of a local device in `lane` (comm/lanes.h) while it runs
  // (collectives/run.h): a lane's streams and members have one user at a time, also when XLA
  // runs two calls of one lane at once on two threads (two chains that share a lane). Throws
  // for a device of another process.
  std::recursive_mutex& device_lock(int64_t device, uint32_t lane = 0) const;
  Doorbell* doorbell(int64_t device) const;

  // The communicator of a group table in sequence space `space` (jaccl's own ops; XLA's
  // collectives number their calls apart on the same devices: abi/host_abi.h), made on first
  // use. Communicators of one table that must not share members differ in `lane` (jaccl's own
  // calls: comm/lanes.h) or in `split_round` (the mpiabi library's with several devices per
  // process: abi/host_abi.h). `id`: the communicator's, communicator_id() of the rest, fixed
  // by the caller (jaccl's lowering passes it with every call); 0: derived here. A call finds
  // a communicator made before by its id under a shared lock (the map is read-mostly), and
  // checks that its table is the communicator's.
  Communicator& communicator(uint64_t id, const int64_t* table, size_t size, int group_size,
                             Space space = Space::kOwnOps, uint32_t lane = 0,
                             uint64_t split_round = 0);

  // The call board (transport/shm/host_memory.h): the counter of calls that local `device`
  // has entered in communicator `comm`, claimed on first use; null when the device's board is
  // full.
  std::atomic<uint32_t>* calls_entered_counter(int64_t device, uint64_t comm);
  // How many calls of communicator `comm` a device of this host has entered (0: none);
  // nullopt for a device of another host, or one whose board had no room for `comm`.
  std::optional<uint32_t> calls_entered(int64_t device, uint64_t comm) const;

  void raise_abort(const std::string& reason);
  // Waits up to `seconds` until the abort notices of raise_abort() left for the other hosts.
  void flush_aborts(double seconds) const;
  bool aborted() const;
  void check_health(const std::vector<int>& processes) const;
  // check_health() without the processes' liveness: their abort boards and this process's.
  void check_aborts(const std::vector<int>& processes) const;
  // Kills (SIGKILL) `process`, one of this host, that a call's deadline found had never
  // reached the call (config.evict_stalled); returns what it did, for the call's error.
  std::string evict(int process) const;
  // The same for the process of `remote_device`, on another host, whose call board this one
  // cannot read: asks it over the TCP link from `local_device` to leave if its device never
  // reached call `seq` of `comm` (it decides, evict_if_absent()); returns what it did.
  std::string request_eviction(int64_t local_device, int64_t remote_device, uint64_t comm,
                               uint32_t seq) const;

 private:
  World(const WorldConfig& config, std::unique_ptr<tcp::TcpTransport> network);
  std::vector<std::pair<int64_t, int64_t>> network_pairs() const;  // (local, remote host's)
  CallBoard* board_of(int64_t id) const;  // null for a device of another host
  // A peer's request_eviction() for local `device`: with config.evict_stalled, this process
  // kills itself (SIGKILL) if the device has not entered call `seq` of the communicator whose
  // id's low 32 bits are `comm`. Runs on the TCP transport's I/O thread.
  void evict_if_absent(int64_t device, uint32_t comm, uint32_t seq, const std::string& from) const;
  size_t local_index(int64_t id) const;  // position among its process's devices
  size_t host_index(int64_t id) const;   // position among the devices of this host

  WorldConfig config_;
  std::unordered_map<int64_t, size_t> device_index_;
  std::vector<size_t> local_index_;      // by device index
  std::vector<int64_t> host_devices_;    // devices of this host, world order
  std::unordered_map<int64_t, size_t> host_index_;
  HostMemory host_memory_;
  std::unique_ptr<HostLinks> links_;  // to the devices of other hosts
  std::vector<std::unique_ptr<Channel>> owned_channels_;
  std::unordered_map<int64_t, std::unordered_map<int64_t, Channel*>> channels_;
  std::unordered_map<const Channel*, std::unique_ptr<SharedChannel>> shared_;  // shares_channels()
  bool attached_ = false;

  using LaneLocks = std::array<std::recursive_mutex, kMaxLanes>;
  std::vector<std::unique_ptr<LaneLocks>> device_locks_;  // by device index, local only
  std::shared_mutex communicators_mutex_;
  std::unordered_map<uint64_t, std::unique_ptr<Communicator>> communicators_;
};

}  // namespace jaccl
