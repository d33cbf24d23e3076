#include "comm/world.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>

#include "comm/communicator.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/process.h"
#include "common/text.h"
#include "transport/ring_channel.h"
#include "transport/shared_channel.h"

namespace jaccl {
namespace {

// The process's world and the calls using it. Never destroyed: device threads may still run
// when static destructors do.
struct WorldSlot {
  std::mutex mutex;
  std::condition_variable unused;
  World* world = nullptr;
  int uses = 0;
  bool shut_down = false;  // a world was destroyed (jax_jaccl.shutdown())
};

WorldSlot& world_slot() {
  static WorldSlot* slot = new WorldSlot;
  return *slot;
}

// The calls entered in the communicator whose id, under `mask`, is `comm`: 0 when the board
// holds no entry of it, nullopt when the board overflowed (it may have had no room for it).
std::optional<uint32_t> entered_on(const CallBoard& board, uint64_t comm, uint64_t mask) {
  for (const CallBoardEntry& entry : board.entries) {
    if ((entry.comm.load(std::memory_order_acquire) & mask) == comm) {
      return entry.entered.load(std::memory_order_acquire);
    }
  }
  if (board.overflowed.load(std::memory_order_acquire) != 0) return std::nullopt;
  return 0u;
}

}  // namespace

World& World::create(const WorldConfig& config, std::unique_ptr<tcp::TcpTransport> network) {
  WorldSlot& slot = world_slot();
  std::lock_guard<std::mutex> lock(slot.mutex);
  if (slot.world) throw_error(ErrorKind::kInvalidArgument, "the jaccl world is already initialised");
  slot.world = new World(config, std::move(network));
  return *slot.world;
}

World* World::get() {
  WorldSlot& slot = world_slot();
  std::lock_guard<std::mutex> lock(slot.mutex);
  return slot.world;
}

World::Use::Use() {
  WorldSlot& slot = world_slot();
  std::lock_guard<std::mutex> lock(slot.mutex);
  world_ = slot.world;
  if (world_ != nullptr) ++slot.uses;
}

World::Use::~Use() {
  if (world_ == nullptr) return;
  WorldSlot& slot = world_slot();
  std::lock_guard<std::mutex> lock(slot.mutex);
  if (--slot.uses == 0) slot.unused.notify_all();
}

World& World::require() {
  World* world = get();
  if (world == nullptr && world_slot().shut_down) {
    throw_error(ErrorKind::kInvalidArgument,
                "the engine was shut down (jax_jaccl.shutdown()): programs compiled before "
                "cannot run; trace and compile them again after jax_jaccl.init()");
  }
  if (world == nullptr) {
    throw_error(ErrorKind::kInvalidArgument,
                "not initialised: call jax_jaccl.init() (jaccl ops call it when traced)");
  }
  return *world;
}

void World::destroy() {
  WorldSlot& slot = world_slot();
  std::unique_lock<std::mutex> lock(slot.mutex);
  World* world = slot.world;
  if (world == nullptr) return;
  slot.shut_down = true;
  const auto patience = std::chrono::duration<double>(world->config().timeout_s + 1.0);
  if (!slot.unused.wait_for(lock, patience, [&] { return slot.uses == 0; })) {
    // A call outlived its own deadline: better to keep the world than to free it under it.
    log(LogLevel::kWarn, "shutdown: ", slot.uses, " calls still use the engine; leaving it");
    slot.world = nullptr;
    return;
  }
  slot.world = nullptr;
  lock.unlock();
  delete world;
}

World::World(const WorldConfig& config, std::unique_ptr<tcp::TcpTransport> network)
    : config_(config) {
  const int me = config_.my_process;
  if (me < 0 || me >= static_cast<int>(config_.processes.size())) {
    throw_error(ErrorKind::kInvalidArgument, "process index ", me, " out of range");
  }
  std::vector<size_t> per_process(config_.processes.size(), 0);
  local_index_.resize(config_.devices.size());
  for (size_t i = 0; i < config_.devices.size(); ++i) {
    const DeviceInfo& d = config_.devices[i];
    if (d.process < 0 || d.process >= static_cast<int>(config_.processes.size())) {
      throw_error(ErrorKind::kInvalidArgument, "device ", d.id, " has bad process ", d.process);
    }
    device_index_[d.id] = i;
    local_index_[i] = per_process[d.process]++;
    device_locks_.push_back(d.process == me ? std::make_unique<LaneLocks>() : nullptr);
    if (same_host(d.process)) {
      host_index_[d.id] = host_devices_.size();
      host_devices_.push_back(d.id);
    }
  }
  // Every process of the host lays out its segment from its own number of devices.
  std::vector<HostSegmentLayout> layouts(config_.processes.size());
  for (size_t p = 0; p < per_process.size(); ++p) {
    layouts[p] = HostSegmentLayout{per_process[p], host_devices_.size(), config_.num_slots,
                                   config_.payload_bytes};
  }
  bool shares_host = false;
  for (const ProcessInfo& p : config_.processes) {
    if (p.index != me && same_host(p.index)) shares_host = true;
  }
  host_memory_ = HostMemory(config_.job_tag, me, std::move(layouts), shares_host);
  log(LogLevel::kInfo, "process ", me, " of ", config_.processes.size(), ": ",
      per_process[me], " local devices, ", host_devices_.size(), " on this host, segment ",
      shares_host ? host_memory_.own_name() : std::string("(private)"), " ",
      host_memory_.own_bytes() >> 10, " KiB");
  links_ = std::make_unique<HostLinks>(
      config_, std::move(network),
      HostLinks::Topology{network_pairs(), [this](int64_t id) { return device(id).process; },
                          [this](int process) { return process_name(process); },
                          [this](int64_t id) { return doorbell(id); }});
}

World::~World() {
  // Communicators hold channel pointers; drop them before the channels and transports.
  communicators_.clear();
  links_.reset();  // frames in flight to other hosts land first (HostLinks' destructor)
  channels_.clear();
  owned_channels_.clear();
}

// Pairs (local device, device of another host) that a network link joins.
std::vector<std::pair<int64_t, int64_t>> World::network_pairs() const {
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (const DeviceInfo& local : config_.devices) {
    if (local.process != config_.my_process) continue;
    for (const DeviceInfo& remote : config_.devices) {
      if (!same_host(remote.process)) pairs.emplace_back(local.id, remote.id);
    }
  }
  return pairs;
}

std::string World::ofi_local_info() const { return links_->local_info(); }

void World::ofi_add_peer(int process, const std::string& info) { links_->add_peer(process, info); }

bool World::same_host(int process) const {
  return config_.processes[process].host == config_.processes[config_.my_process].host;
}

const DeviceInfo& World::device(int64_t id) const {
  auto it = device_index_.find(id);
  if (it == device_index_.end()) {
    throw_error(ErrorKind::kInvalidArgument, "device ", id, " is not part of this jaccl world");
  }
  return config_.devices[it->second];
}

std::recursive_mutex& World::device_lock(int64_t id, uint32_t lane) const {
  auto it = device_index_.find(id);
  if (it == device_index_.end()) device(id);  // throws naming the device
  const auto& locks = device_locks_[it->second];
  if (!locks) throw_error(ErrorKind::kInvalidArgument, "device ", id, " is not a device of this process");
  return (*locks)[lane % kMaxLanes];
}

size_t World::local_index(int64_t id) const {
  device(id);
  return local_index_[device_index_.at(id)];
}

size_t World::host_index(int64_t id) const {
  auto it = host_index_.find(id);
  if (it == host_index_.end()) {
    throw_error(ErrorKind::kInvalidArgument, "device ", id, " is not on this host");
  }
  return it->second;
}

std::string World::describe_device(int64_t id) const {
  const DeviceInfo& d = device(id);
  const ProcessInfo& p = config_.processes[d.process];
  std::string out = text("device ", id, ", ", process_name(d.process), ", pid ", p.pid);
  if (!same_host(d.process)) append(out, " on host ", p.host);
  return out;
}

bool World::readable(int reader, int owner) const {
  if (reader == owner) return true;
  if (!same_host(reader) || !same_host(owner) || !attached_) return false;
  return host_memory_.readable(reader, owner);
}

std::string World::process_name(int process) const {
  const ProcessInfo& p = config_.processes[process];
  return text("process ", p.jax_index >= 0 ? p.jax_index : process);
}

void World::attach_peers() {
  JACCL_CHECK(!attached_, "attach_peers called twice");
  for (const ProcessInfo& p : config_.processes) {
    if (p.index == config_.my_process || !same_host(p.index)) continue;
    host_memory_.attach(p.index, p.pid);
  }
  // One ring per ordered pair of devices on this host with a local end.
  for (int64_t dst : host_devices_) {
    int dst_process = device(dst).process;
    for (int64_t src : host_devices_) {
      if (src == dst) continue;
      int src_process = device(src).process;
      if (src_process != config_.my_process && dst_process != config_.my_process) continue;
      void* memory = host_memory_.ring(dst_process, local_index(dst), host_index(src));
      const char* kind = src_process == dst_process ? "local" : "shm";
      owned_channels_.push_back(std::make_unique<RingChannel>(
          memory, config_.num_slots, config_.payload_bytes, doorbell(src), doorbell(dst), kind));
      channels_[src][dst] = owned_channels_.back().get();
    }
  }
  for (const HostLinks::Link& link : links_->connect(
           [this](int64_t device, uint32_t comm, uint32_t seq, const std::string& from) {
             evict_if_absent(device, comm, seq, from);
           })) {
    channels_[link.src][link.dst] = link.channel;
  }
  if (config_.shared_channels) {
    for (const auto& [src, row] : channels_) {
      for (const auto& [dst, channel] : row) {
        shared_[channel] = std::make_unique<SharedChannel>(
            channel, is_local(src) ? doorbell(src) : nullptr, is_local(dst) ? doorbell(dst) : nullptr);
      }
    }
  }
  attached_ = true;
}

void World::unlink_own_segment() { host_memory_.unlink_own(); }

Doorbell* World::doorbell(int64_t id) const {
  Doorbell* bell = host_memory_.doorbell(device(id).process, local_index(id));
  if (bell == nullptr) {
    throw_error(ErrorKind::kInvalidArgument, "no shared memory with ", describe_device(id));
  }
  return bell;
}

Channel* World::channel(int64_t src, int64_t dst) const {
  auto row = channels_.find(src);
  if (row != channels_.end()) {
    auto it = row->second.find(dst);
    if (it != row->second.end()) return it->second;
  }
  throw_error(ErrorKind::kInvalidArgument, "no transport from ", describe_device(src), " to ",
              describe_device(dst),
              same_host(device(src).process) && same_host(device(dst).process)
                  ? ""
                  : ": the devices are on different hosts and no network transport is built");
}

SharedChannel* World::shared_channel(int64_t src, int64_t dst) const {
  auto it = shared_.find(channel(src, dst));
  JACCL_CHECK(it != shared_.end(), "no shared channel (the world does not share channels)");
  return it->second.get();
}

Communicator& World::communicator(uint64_t id, const int64_t* table, size_t size,
                                  int group_size, Space space, uint32_t lane,
                                  uint64_t split_round) {
  // The table's own id: derived here when the caller carries none (0), checked at creation
  // when it carries one.
  const bool derived = id == 0;
  if (derived) id = communicator_id(table, size, group_size, space, lane, split_round);
  // The communicator of `id` made before (nullptr: none), if it is this table's.
  auto made = [&]() -> Communicator* {
    auto it = communicators_.find(id);
    if (it == communicators_.end()) return nullptr;
    if (!it->second->matches(table, size, group_size)) {
      throw_error(ErrorKind::kInternal, "communicator id collision");
    }
    return it->second.get();
  };
  {
    std::shared_lock<std::shared_mutex> read(communicators_mutex_);
    if (Communicator* comm = made()) return *comm;
  }
  // Another space, lane or split round, another id: peers check it in every frame header, so
  // calls of different communicators never pair. An id the caller fixed must be that one.
  if (!derived && id != communicator_id(table, size, group_size, space, lane, split_round)) {
    throw_error(ErrorKind::kInternal, "communicator id ", hex(id), " is not its table's");
  }
  std::unique_lock<std::shared_mutex> write(communicators_mutex_);
  if (Communicator* comm = made()) return *comm;  // made meanwhile by another thread
  // A shared channel's streams are named by the frames' channel streams: for XLA's
  // collectives, the id's low 31 bits (communicator.h), which must then differ.
  if (xla_streams() && space != Space::kOwnOps) {
    for (const auto& [other, comm] : communicators_) {
      if (comm->channel_stream() == (static_cast<uint32_t>(id) | 0x80000000u)) {
        throw_error(ErrorKind::kInternal, "communicators ", hex(other), " and ", hex(id),
                    " share the low 31 bits of their ids, which name streams of shared channels");
      }
    }
  }
  auto comm = std::make_unique<Communicator>(*this, id, table, size, group_size, space, lane);
  Communicator& ref = *comm;
  communicators_[id] = std::move(comm);
  return ref;
}

CallBoard* World::board_of(int64_t id) const {
  return host_memory_.board(device(id).process, local_index(id));
}

std::atomic<uint32_t>* World::calls_entered_counter(int64_t device, uint64_t comm) {
  CallBoard* board = board_of(device);
  if (board == nullptr || comm == 0) return nullptr;
  for (CallBoardEntry& entry : board->entries) {
    uint64_t owner = entry.comm.load(std::memory_order_acquire);
    if (owner == 0 && entry.comm.compare_exchange_strong(owner, comm)) return &entry.entered;
    if (owner == comm) return &entry.entered;
  }
  board->overflowed.store(1, std::memory_order_release);
  return nullptr;
}

std::optional<uint32_t> World::calls_entered(int64_t device, uint64_t comm) const {
  const CallBoard* board = board_of(device);
  if (board == nullptr || comm == 0) return std::nullopt;
  return entered_on(*board, comm, ~uint64_t{0});
}

void World::raise_abort(const std::string& reason) {
  AbortBoard& board = host_memory_.header(config_.my_process)->abort;
  uint32_t expected = 0;
  if (board.state.compare_exchange_strong(expected, 1)) {
    std::snprintf(board.reason, sizeof board.reason, "%s", reason.c_str());
    board.state.store(2, std::memory_order_release);
    log(LogLevel::kWarn, "aborting: ", reason);
  }
  // Tell the other hosts, and wake every device of this host so waiting threads see it now.
  if (links_->tcp()) links_->tcp()->broadcast_abort(reason);
  for (int64_t id : host_devices_) ring(doorbell(id));
}

void World::flush_aborts(double seconds) const {
  const tcp::TcpTransport* network = links_->tcp();
  if (network == nullptr) return;
  const Deadline deadline(seconds);
  while (!network->aborts_sent() && !deadline.expired()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool World::aborted() const {
  return host_memory_.header(config_.my_process)->abort.state.load(std::memory_order_acquire) != 0;
}

void World::check_aborts(const std::vector<int>& processes) const {
  // A process that raised its abort writes the reason next: give it a moment to finish.
  auto reason_of = [](const SegmentHeader* header) {
    const Deadline writing(0.05);
    while (header->abort.state.load(std::memory_order_acquire) != 2 && !writing.expired()) {
      std::this_thread::yield();
    }
    return header->abort.state.load(std::memory_order_acquire) == 2
               ? std::string(header->abort.reason)
               : std::string("(reason being written)");
  };
  const SegmentHeader* own = host_memory_.header(config_.my_process);
  if (own->abort.state.load(std::memory_order_acquire) != 0) {
    throw_error(ErrorKind::kPeerFailure, "this process stopped communicating after an earlier "
                "failure: ", reason_of(own));
  }
  for (int p : processes) {
    if (p == config_.my_process || !same_host(p)) continue;
    const SegmentHeader* header = host_memory_.header(p);
    if (header != nullptr && header->abort.state.load(std::memory_order_acquire) != 0) {
      throw_error(ErrorKind::kPeerFailure, process_name(p), " (pid ", config_.processes[p].pid,
                  ") failed: ", reason_of(header));
    }
  }
}

void World::check_health(const std::vector<int>& processes) const {
  check_aborts(processes);
  for (int p : processes) {
    if (p == config_.my_process || !same_host(p)) continue;
    const ProcessInfo& info = config_.processes[p];
    if (!pid_alive(info.pid)) {
      throw_error(ErrorKind::kPeerFailure, process_name(p), " (pid ", info.pid, ") died");
    }
  }
}

// The process was alive a moment ago (check_health() ran first at the deadline), so its pid
// is still its own. Every survivor that times out may kill it: a second kill finds it gone.
std::string World::evict(int process) const {
  const ProcessInfo& info = config_.processes[process];
  if (process == config_.my_process || !same_host(process)) return "";
  const bool killed = ::kill(info.pid, SIGKILL) == 0 || errno == ESRCH;
  log(LogLevel::kWarn, killed ? "evicted " : "could not evict ", process_name(process), " (pid ",
      info.pid, "), stalled past the deadline (JACCL_EVICT_STALLED)",
      killed ? "" : text(": ", std::strerror(errno)));
  return killed ? text(process_name(process), " (pid ", info.pid, ") evicted with SIGKILL")
                : "";
}

std::string World::request_eviction(int64_t local_device, int64_t remote_device, uint64_t comm,
                                    uint32_t seq) const {
  tcp::TcpTransport* network = links_->tcp();
  if (network == nullptr || same_host(device(remote_device).process) ||
      !network->request_eviction(local_device, remote_device, static_cast<uint32_t>(comm), seq)) {
    return "";
  }
  return text(process_name(device(remote_device).process),
              " (on another host) asked to leave if it never reached this call");
}

void World::evict_if_absent(int64_t device, uint32_t comm, uint32_t seq,
                            const std::string& from) const {
  if (!config_.evict_stalled) return;
  const CallBoard* board = board_of(device);
  if (board == nullptr) return;
  const std::optional<uint32_t> entered = entered_on(*board, comm, 0xffffffffu);
  // Declined (it stays, and says why: the asker waits on until JAX counts this process lost):
  // the board had no room for the communicator, or the device is in that call (or past it),
  // waiting like the asker.
  if (!entered || *entered > seq) {
    log(LogLevel::kWarn, "stays: ", from, " timed out in call #", seq, " waiting for ",
        describe_device(device), ", which ",
        entered ? text("entered it (its calls reached #", *entered - 1, ")")
                : std::string("this process cannot tell (its call board had no room)"),
        "; not leaving (JACCL_EVICT_STALLED)");
    return;
  }
  log(LogLevel::kWarn, "evicted: ", from, " timed out in call #", seq, " waiting for ",
      describe_device(device), ", which never reached it; this process leaves with SIGKILL ",
      "(JACCL_EVICT_STALLED)");
  ::kill(::getpid(), SIGKILL);
}

}  // namespace jaccl
