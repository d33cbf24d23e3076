// The transport contract: one-way, in-order channels of fixed-size frames.
//
// A Channel connects a producer (the device that sends) to a consumer (the
// device that receives). The producer fills frames in place and publishes
// them; the consumer reads frames in place and gives them back. Frames are
// never copied by the contract itself: a shared-memory channel lets the
// consumer read the producer's writes directly, a network channel moves the
// published frames with its own I/O thread into the consumer's ring.
//
// Threading: at any moment at most one thread produces and one consumes on a
// channel. All calls are non-blocking: try_reserve()/try_peek() return nullptr
// when the ring is full/empty. Waiting is not the transport's business: the
// engine waits on its device's Doorbell, which commit() and release() ring for
// the other side.
//
// Liveness: a transport that learns its peer is gone (closed socket) reports
// it through failure(); shared memory has no such signal and relies on the
// World's process checks.
//
// The network transports keep the contract with rings at both ends: TCP's
// I/O thread sends committed frames into the consumer's ring (tcp/), OFI's
// writes them with immediate data into the same slot there (ofi/).
#pragma once

#include <cstddef>
#include <string>

#include "transport/frame.h"

namespace jaccl {

class Channel {
 public:
  virtual ~Channel() = default;

  // Largest payload a frame carries (the same on both ends of a channel).
  virtual size_t payload_capacity() const = 0;

  // Producer: the next free frame, or nullptr when all frames are in flight.
  virtual Frame* try_reserve() = 0;
  // Producer: publishes the reserved frame; wakes the consumer.
  virtual void commit() = 0;
  // Producer: keeps the reserved frame unpublished (nothing was written that must be sent);
  // the next try_reserve() may return it again. A producer that cannot use every frame it
  // reserved this round gives the others back, so a channel shared by several streams
  // (shared_channel.h) is not held while it waits.
  virtual void unreserve() {}

  // Consumer: the oldest published frame, or nullptr. Calling it again before
  // release() returns the same frame.
  virtual const Frame* try_peek() = 0;
  // Consumer: gives the peeked frame back; wakes the producer.
  virtual void release() = 0;
  // Consumer: done reading the peeked frame for now, without consuming it (the next
  // try_peek() returns it again). A channel shared by several streams (shared_channel.h) lends
  // its frames in place only until release() or unpeek().
  virtual void unpeek() {}

  // Non-empty when the transport knows the channel is broken.
  virtual std::string failure() const { return {}; }
  // "local" (shared memory in one process), "shm" (between processes), "tcp", "ofi": for logs.
  virtual const char* kind() const = 0;
};

}  // namespace jaccl
