// A Channel over a ring of frames in memory both ends can address: a
// shared-memory segment between processes of one host, or the heap between
// devices of one process.
//
// Layout at `memory` (ring_bytes() bytes, zero-initialised by the creator):
// a RingControl (head and tail counters on their own cache lines), then
// num_slots frames of frame_bytes each. The producer writes frame
// head % num_slots and then advances head (release); the consumer reads frame
// tail % num_slots once head > tail (acquire) and then advances tail. Either
// side rings the other's doorbell after moving its counter.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "transport/doorbell.h"
#include "transport/transport.h"

namespace jaccl {

struct RingControl {
  alignas(64) std::atomic<uint32_t> head;  // frames published so far
  alignas(64) std::atomic<uint32_t> tail;  // frames released so far
};

class RingChannel : public Channel {
 public:
  // Bytes a ring of num_slots frames with payload_bytes each occupies; of one frame.
  static size_t ring_bytes(int num_slots, size_t payload_bytes);
  static size_t frame_bytes(size_t payload_bytes);

  RingChannel(void* memory, int num_slots, size_t payload_bytes, Doorbell* producer_bell,
              Doorbell* consumer_bell, const char* kind);
  // The same with the counters apart from the frames (num_slots * frame_bytes() at `slots`):
  // a transport whose frames a remote writes keeps the counters out of that memory.
  RingChannel(RingControl* control, void* slots, int num_slots, size_t payload_bytes,
              Doorbell* producer_bell, Doorbell* consumer_bell, const char* kind);

  size_t payload_capacity() const override { return payload_bytes_; }
  Frame* try_reserve() override;
  void commit() override;
  const Frame* try_peek() override;
  void release() override;
  const char* kind() const override { return kind_; }

  // Index-level access for a transport's I/O thread standing in for the remote end: it
  // may fill or drain frames out of order and then publish the new head / tail.
  uint32_t head() const { return control_->head.load(std::memory_order_acquire); }
  uint32_t tail() const { return control_->tail.load(std::memory_order_acquire); }
  Frame* slot(uint32_t index) const;
  int num_slots() const { return num_slots_; }
  void publish_head(uint32_t head);  // frames up to `head` are filled: wakes the consumer
  void publish_tail(uint32_t tail);  // frames up to `tail` are drained: wakes the producer

 private:
  RingControl* control_;
  unsigned char* slots_;
  int num_slots_;
  size_t payload_bytes_;
  size_t frame_bytes_;
  Doorbell* producer_bell_;
  Doorbell* consumer_bell_;
  const char* kind_;
};

}  // namespace jaccl
