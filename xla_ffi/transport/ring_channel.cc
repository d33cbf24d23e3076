#include "transport/ring_channel.h"

#include "common/error.h"

namespace jaccl {
namespace {
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
}  // namespace

size_t RingChannel::frame_bytes(size_t payload_bytes) {
  return round_up(sizeof(FrameHeader) + payload_bytes, 64);
}

size_t RingChannel::ring_bytes(int num_slots, size_t payload_bytes) {
  return sizeof(RingControl) + num_slots * frame_bytes(payload_bytes);
}

RingChannel::RingChannel(void* memory, int num_slots, size_t payload_bytes,
                         Doorbell* producer_bell, Doorbell* consumer_bell, const char* kind)
    : RingChannel(static_cast<RingControl*>(memory),
                  static_cast<unsigned char*>(memory) + sizeof(RingControl), num_slots,
                  payload_bytes, producer_bell, consumer_bell, kind) {}

RingChannel::RingChannel(RingControl* control, void* slots, int num_slots, size_t payload_bytes,
                         Doorbell* producer_bell, Doorbell* consumer_bell, const char* kind)
    : control_(control),
      slots_(static_cast<unsigned char*>(slots)),
      num_slots_(num_slots),
      payload_bytes_(payload_bytes),
      frame_bytes_(frame_bytes(payload_bytes)),
      producer_bell_(producer_bell),
      consumer_bell_(consumer_bell),
      kind_(kind) {
  JACCL_CHECK(num_slots > 0 && payload_bytes % 64 == 0, "bad ring geometry");
}

Frame* RingChannel::slot(uint32_t index) const {
  return reinterpret_cast<Frame*>(slots_ + (index % num_slots_) * frame_bytes_);
}

Frame* RingChannel::try_reserve() {
  uint32_t head = control_->head.load(std::memory_order_relaxed);
  uint32_t tail = control_->tail.load(std::memory_order_acquire);
  if (head - tail >= static_cast<uint32_t>(num_slots_)) return nullptr;
  return slot(head);
}

void RingChannel::commit() {
  control_->head.fetch_add(1, std::memory_order_release);
  ring(consumer_bell_);
}

const Frame* RingChannel::try_peek() {
  uint32_t tail = control_->tail.load(std::memory_order_relaxed);
  uint32_t head = control_->head.load(std::memory_order_acquire);
  if (head == tail) return nullptr;
  return slot(tail);
}

void RingChannel::publish_head(uint32_t head) {
  control_->head.store(head, std::memory_order_release);
  ring(consumer_bell_);
}

void RingChannel::publish_tail(uint32_t tail) {
  control_->tail.store(tail, std::memory_order_release);
  ring(producer_bell_);
}

void RingChannel::release() {
  control_->tail.fetch_add(1, std::memory_order_release);
  ring(producer_bell_);
}

}  // namespace jaccl
