// Several streams over one channel: for a world whose calls may use the same pair of devices
// at the same moment from different threads. That happens with jaccl's lanes (calls of one
// device in different chains run at once, each on its lane's thread: comm/lanes.h) and
// with XLA's collectives on several CPU devices per process (the mpiabi library cannot tell which
// XLA device calls, so it places each communicator's members on devices of its own choosing, and
// two XLA devices can share one of jaccl's devices in two communicators at once).
//
// Contract: a SharedChannel wraps one Channel (the transport's, which it then owns the ends
// of); each (channel stream, sending rank) is a stream with a StreamChannel of its own, which is
// a full Channel for the engine. A frame's stream is read from its header (channel_stream,
// src_rank).
// - Producing: try_reserve() claims the channel for its stream until commit() or
//   unreserve(); it returns nullptr when the ring is full or another stream holds the claim
//   (that stream's commit rings the producer's doorbell, so the waiter looks again).
// - Consuming: try_peek() returns the oldest frame of its stream: one copied out earlier, or
//   the channel's own oldest frame, lent in place (no copy) until release() or unpeek(). A
//   frame of another stream at the head of the channel is copied into that stream's queue
//   (so a stream never waits behind another's frames), unless it is lent: then try_peek()
//   returns nullptr until the lender gives it back, which rings the consumer's doorbell.
//   Lenders must give frames back without waiting for anything (the engine releases or
//   unpeeks every frame within one step), or another stream could wait on them forever.
// - One thread at a time per stream, as for any Channel; any number of streams of one
//   SharedChannel on any threads.
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

  // The stream of frames of `channel_stream` (FrameHeader::channel_stream) from `src_rank`.
  static uint64_t stream_of(uint32_t channel_stream, uint32_t src_rank) {
    return (static_cast<uint64_t>(channel_stream) << 32) | src_rank;
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
  void unpeek(uint64_t stream);
  void give_back_lend();  // under consumer_mutex_
  Copy take_copy();  // a frame-sized buffer, reused when one is free

  Channel* channel_;
  Doorbell* producer_bell_;
  Doorbell* consumer_bell_;
  size_t frame_bytes_;
  std::atomic<StreamChannel*> producer_{nullptr};  // the stream holding the claim
  std::atomic<bool> producer_waited_{false};       // another stream found the claim taken
  std::mutex consumer_mutex_;                      // the channel's consumer end, the queues
  std::unordered_map<uint64_t, std::deque<Copy>> queues_;
  static constexpr uint64_t kNoStream = ~0ull;
  uint64_t lent_to_ = kNoStream;                   // the stream reading the channel's head
  bool consumer_waited_ = false;                   // another stream found the head lent
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
  void unpeek() override { shared_.unpeek(stream_); }
  std::string failure() const override { return shared_.channel_->failure(); }
  const char* kind() const override { return shared_.channel_->kind(); }

 private:
  SharedChannel& shared_;
  uint64_t stream_;
};

}  // namespace jaccl
