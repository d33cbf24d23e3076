#include "transport/shm/host_memory.h"

#include <unistd.h>

#include <cstddef>
#include <random>
#include <utility>

#include "common/error.h"
#include "transport/ring_channel.h"
#include "transport/shm/single_copy.h"

namespace jaccl {
namespace {
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
}  // namespace

size_t HostSegmentLayout::doorbells_offset() const { return round_up(sizeof(SegmentHeader), 64); }

size_t HostSegmentLayout::boards_offset() const {
  return round_up(doorbells_offset() + num_local_devices * sizeof(Doorbell), 64);
}

size_t HostSegmentLayout::rings_offset() const {
  return round_up(boards_offset() + num_local_devices * sizeof(CallBoard), 4096);
}

size_t HostSegmentLayout::ring_bytes() const {
  return round_up(RingChannel::ring_bytes(num_slots, payload_bytes), 4096);
}

size_t HostSegmentLayout::total_bytes() const {
  return rings_offset() + num_local_devices * num_host_devices * ring_bytes();
}

size_t HostSegmentLayout::ring_offset(size_t dst_local, size_t src_host_index) const {
  return rings_offset() + (dst_local * num_host_devices + src_host_index) * ring_bytes();
}

namespace {
std::string segment_name(const std::string& job_tag, int process) {
  return "/jaccl-" + job_tag + "-" + std::to_string(process);
}
}  // namespace

HostMemory::HostMemory(const std::string& job_tag, int me, std::vector<HostSegmentLayout> layouts,
                       bool shared)
    : job_tag_(job_tag), me_(me), layouts_(std::move(layouts)), peers_(layouts_.size()) {
  const HostSegmentLayout& layout = layouts_[me];
  const size_t bytes = layout.total_bytes();
  own_ = shared ? Segment::create(segment_name(job_tag_, me), bytes) : Segment::anonymous(bytes);
  auto* header = static_cast<SegmentHeader*>(own_.data());
  header->magic = kSegmentMagic;
  header->version = kSegmentVersion;
  header->process = static_cast<uint32_t>(me);
  header->pid = static_cast<int32_t>(getpid());
  header->num_local_devices = static_cast<uint32_t>(layout.num_local_devices);
  header->num_host_devices = static_cast<uint32_t>(layout.num_host_devices);
  header->num_slots = static_cast<uint32_t>(layout.num_slots);
  header->payload_bytes = layout.payload_bytes;
  header->total_bytes = bytes;
  header->own_address = reinterpret_cast<uint64_t>(own_.data());
  header->nonce = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
}

void HostMemory::attach(int process, int32_t pid) {
  const HostSegmentLayout& mine = layouts_[me_];
  Segment segment = Segment::open(segment_name(job_tag_, process),
                                  layouts_[process].total_bytes());
  auto* header = static_cast<SegmentHeader*>(segment.data());
  if (header->magic != kSegmentMagic || header->version != kSegmentVersion ||
      header->pid != pid || header->payload_bytes != mine.payload_bytes ||
      header->num_slots != static_cast<uint32_t>(mine.num_slots)) {
    throw_error(ErrorKind::kMismatch, "shared-memory segment of process ", process,
                " does not match this process's settings (pid ", header->pid, " vs ", pid,
                ", frame ", header->payload_bytes, " vs ", mine.payload_bytes, " bytes, ",
                header->num_slots, " vs ", mine.num_slots,
                " slots): set the same JACCL_* variables everywhere");
  }
  if (process < kReadableProcesses) {
    // A peer with this process's pid is one of another pid namespace: this process would read
    // itself.
    const bool in_place = pid != getpid() && can_read_process(
        pid, header->own_address + offsetof(SegmentHeader, nonce), header->nonce);
    this->header(me_)->readable[process].store(in_place ? 1 : 2, std::memory_order_release);
  }
  peers_[process] = std::move(segment);
}

bool HostMemory::readable(int reader, int owner) const {
  if (reader == owner) return true;
  if (owner >= kReadableProcesses || base(reader) == nullptr) return false;
  return header(reader)->readable[owner].load(std::memory_order_acquire) == 1;
}

unsigned char* HostMemory::base(int process) const {
  return static_cast<unsigned char*>(process == me_ ? own_.data() : peers_[process].data());
}

SegmentHeader* HostMemory::header(int process) const {
  return reinterpret_cast<SegmentHeader*>(base(process));
}

Doorbell* HostMemory::doorbell(int process, size_t local_device) const {
  unsigned char* at = base(process);
  if (at == nullptr) return nullptr;
  return reinterpret_cast<Doorbell*>(at + layouts_[process].doorbells_offset() +
                                     local_device * sizeof(Doorbell));
}

CallBoard* HostMemory::board(int process, size_t local_device) const {
  unsigned char* at = base(process);
  if (at == nullptr) return nullptr;
  return reinterpret_cast<CallBoard*>(at + layouts_[process].boards_offset() +
                                      local_device * sizeof(CallBoard));
}

void* HostMemory::ring(int dst_process, size_t dst_local, size_t src_host_index) const {
  unsigned char* at = base(dst_process);
  if (at == nullptr) return nullptr;
  return at + layouts_[dst_process].ring_offset(dst_local, src_host_index);
}

}  // namespace jaccl
