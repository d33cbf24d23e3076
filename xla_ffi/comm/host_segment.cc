#include "comm/host_segment.h"

#include "transport/ring_channel.h"

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

}  // namespace jaccl
