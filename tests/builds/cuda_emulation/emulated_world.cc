#include "emulated_world.h"

#include <atomic>
#include <cstring>

namespace jaccl::cuda {
namespace {

EmulatedWorld* world = nullptr;

template <typename T>
T* carve(std::vector<std::unique_ptr<char[]>>& memory, size_t bytes) {
  // 256-byte aligned and zeroed, as cudaMalloc'd workspaces are after set-up.
  memory.emplace_back(new char[bytes + 256]());
  auto address = reinterpret_cast<uintptr_t>(memory.back().get());
  return reinterpret_cast<T*>((address + 255) / 256 * 256);
}

}  // namespace

EmulatedWorld::EmulatedWorld(int devices, size_t data_bytes, double timeout_s,
                             std::vector<int> process_of)
    : timeout_ns_(static_cast<uint64_t>(timeout_s * 1e9)) {
  jaccl_emu::reset_all_contexts();  // fresh GPUs
  if (process_of.empty()) process_of.assign(static_cast<size_t>(devices), 0);
  dead_.assign(static_cast<size_t>(devices), 0);
  for (int g = 0; g < devices; ++g) {
    auto d = std::make_unique<LocalDevice>();
    d->ordinal = g;
    d->device = g;
    Workspace& w = d->workspace;
    w.flags = carve<uint64_t>(memory_, sizeof(uint64_t) * static_cast<size_t>(devices));
    w.descriptor = carve<uint64_t>(memory_, sizeof(uint64_t) * kDescriptorWords);
    w.abort = carve<int64_t>(memory_, sizeof(int64_t));
    w.data = carve<char>(memory_, data_bytes);
    w.data_bytes = data_bytes;
    d->status_host = d->status_device = carve<DeviceStatus>(memory_, sizeof(DeviceStatus));
    d->barriers.assign(static_cast<size_t>(devices), 0);
    peers_.push_back(Peer{w, process_of[static_cast<size_t>(g)]});
    locals_.push_back(std::move(d));
  }
  world = this;
}

EmulatedWorld::~EmulatedWorld() { world = nullptr; }

EmulatedWorld* EmulatedWorld::current() { return world; }

void EmulatedWorld::kill(int process) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  *reinterpret_cast<volatile uint8_t*>(&dead_[static_cast<size_t>(process)]) = 1;
}

const Peer* EmulatedWorld::peer(int64_t device) const {
  if (device < 0 || device >= static_cast<int64_t>(peers_.size())) return nullptr;
  return &peers_[static_cast<size_t>(device)];
}

// The handler side of xla_ffi/cuda/peers.h.
LocalDevice* local_device(int ordinal) {
  return ordinal < world->size() ? &world->device(ordinal) : nullptr;
}
const Peer* peer(int64_t device) { return world->peer(device); }
bool reachable(int64_t, int64_t) { return true; }
uint64_t timeout_ns() { return world->timeout_ns(); }
const volatile uint8_t* dead_processes() { return world->dead(); }

std::string failure(const LocalDevice& device) {
  if (!device.broken.empty()) return device.broken;
  return device.status_host->error == kPeerOk ? "" : "error " + std::to_string(device.status_host->error);
}

void mark_broken(LocalDevice& device, const std::vector<int64_t>& members, const std::string& why) {
  for (int64_t m : members) *reinterpret_cast<volatile int64_t*>(world->peer(m)->workspace.abort) = device.device + 1;
  if (device.broken.empty()) device.broken = why;
}

}  // namespace jaccl::cuda
