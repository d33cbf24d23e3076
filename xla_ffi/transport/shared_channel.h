// Several streams over one channel: for a world whose calls of different communicators may
// use the same pair of devices at the same moment from different threads. That happens with
// XLA's collectives on several CPU devices per process: the MPI shim cannot tell which XLA
// device calls, so it places each communicator's members on devices of its own choosing, and
// two XLA devices can share one of jaccl's devices in two communicators at once.
//
// Contract: a SharedChannel wraps one Channel (the transport's, which it then owns the ends
// of); each (communicator, sending rank) is a stream with a StreamChannel of its own, which is
// a full Channel for the engine. A frame's stream is read from its header (comm, src_rank).
// - Producing: try_reserve() claims the channel for its stream until commit() or
//   unreserve(); it returns nullptr when the ring is full or another stream holds the claim
//   (that stream's commit rings the producer's doorbell, so the waiter looks again).
// - Consuming: try_peek() first moves every frame waiting in the channel into the queue of its
//   stream (a copy), so a stream never waits behind another's frames, then returns the oldest
//   of its own; release() drops it. A frame queued for another stream rings the consumer's
//   doorbell: that stream's reader may have looked already.
// - One thread at a time per StreamChannel, as for any Channel; any number of StreamChannels
//   of one SharedChannel on any threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "transport/doorbell.h"
#include "transport/transport.h"

namespace jaccl {

class StreamChannel;

class SharedChannel {
 public:
  // The doorbells are those of the local ends (nullptr for an end in another process).
  SharedChannel(Channel* channel, Doorbell* producer_bell, Doorbell* consumer_bell);
  ~SharedChannel();

  static uint64_t stream_of(uint32_t comm, uint32_t src_rank) {
    return (static_cast<uint64_t>(comm) << 32) | src_rank;
  }
  std::unique_ptr<StreamChannel> stream(uint64_t stream);

 private:
  friend class StreamChannel;
  struct FreeBytes {
    void operator()(unsigned char* p) const;
  };
  using Copy = std::unique_ptr<unsigned char, FreeBytes>;

  Frame* reserve(StreamChannel* who);
  void commit(StreamChannel* who);
  void unreserve(StreamChannel* who);
  const Frame* peek(uint64_t stream);
  void release(uint64_t stream);
  Copy take_copy();  // a frame-sized buffer, reused when one is free

  Channel* channel_;
  Doorbell* producer_bell_;
  Doorbell* consumer_bell_;
  size_t frame_bytes_;
  std::atomic<StreamChannel*> producer_{nullptr};  // the stream holding the claim
  std::atomic<bool> producer_waited_{false};       // another stream found the claim taken
  std::mutex consumer_mutex_;                      // the channel's consumer end, the queues
  std::unordered_map<uint64_t, std::deque<Copy>> queues_;
  std::vector<Copy> spare_;
};

class StreamChannel : public Channel {
 public:
  StreamChannel(SharedChannel& shared, uint64_t stream) : shared_(shared), stream_(stream) {}

  size_t payload_capacity() const override { return shared_.channel_->payload_capacity(); }
  Frame* try_reserve() override { return shared_.reserve(this); }
  void commit() override { shared_.commit(this); }
  void unreserve() override { shared_.unreserve(this); }
  const Frame* try_peek() override { return shared_.peek(stream_); }
  void release() override { shared_.release(stream_); }
  std::string failure() const override { return shared_.channel_->failure(); }
  const char* kind() const override { return shared_.channel_->kind(); }

 private:
  SharedChannel& shared_;
  uint64_t stream_;
};

}  // namespace jaccl
