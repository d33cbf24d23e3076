#include "comm/frame_stream.h"

#include "comm/world.h"
#include "common/error.h"
#include "transport/doorbell.h"
#include "transport/frame.h"

namespace jaccl {
namespace {

constexpr int kMaxWaitUs = 10000;

// Sleeps on `bell` until it rings (or 10 ms), after checking the channel and the deadline.
void wait(World& world, Channel* channel, Doorbell* bell, uint32_t seen, const Deadline& deadline,
          int64_t src, int64_t dst) {
  const std::string failure = channel->failure();
  if (!failure.empty()) {
    throw_error(ErrorKind::kPeerFailure, "frame stream ", src, " -> ", dst, ": ", failure);
  }
  if (deadline.expired()) {
    throw_error(ErrorKind::kTimeout, "frame stream ", src, " -> ", dst, " timed out after ",
                deadline.seconds(), " s");
  }
  wait_for_ring(bell, seen, world.config().spin_us, kMaxWaitUs);
}

Channel* checked_channel(World& world, int64_t src, int64_t dst, size_t payload) {
  Channel* channel = world.channel(src, dst);
  if (payload > channel->payload_capacity()) {
    throw_error(ErrorKind::kInvalidArgument, "frame stream: ", payload, " B exceeds the frame payload of ",
                channel->payload_capacity(), " B (JACCL_FRAME_KB)");
  }
  return channel;
}

}  // namespace

void send_frames(World& world, int64_t src, int64_t dst, size_t payload, int count,
                 const Deadline& deadline) {
  Channel* channel = checked_channel(world, src, dst, payload);
  Doorbell* bell = world.doorbell(src);
  for (int i = 0; i < count;) {
    const uint32_t seen = bell->seq.load(std::memory_order_acquire);
    Frame* frame = channel->try_reserve();
    if (frame == nullptr) {
      wait(world, channel, bell, seen, deadline, src, dst);
      continue;
    }
    frame->header = FrameHeader{};
    frame->header.magic = kFrameMagic;
    frame->header.offset = static_cast<uint64_t>(i);
    frame->header.nbytes = static_cast<uint32_t>(payload);
    channel->commit();
    ++i;
  }
}

double receive_frames(World& world, int64_t src, int64_t dst, size_t payload, int count,
                      const Deadline& deadline) {
  Channel* channel = checked_channel(world, src, dst, payload);
  Doorbell* bell = world.doorbell(dst);
  Clock::time_point first{};
  for (int i = 0; i < count;) {
    const uint32_t seen = bell->seq.load(std::memory_order_acquire);
    const Frame* frame = channel->try_peek();
    if (frame == nullptr) {
      wait(world, channel, bell, seen, deadline, src, dst);
      continue;
    }
    if (i == 0) first = Clock::now();
    const FrameHeader& h = frame->header;
    if (h.magic != kFrameMagic || h.offset != static_cast<uint64_t>(i) || h.nbytes != payload) {
      throw_error(ErrorKind::kMismatch, "frame stream ", src, " -> ", dst, ": frame ", i,
                  " arrived as number ", h.offset, " with ", h.nbytes, " B (expected ", payload, ")");
    }
    channel->release();
    ++i;
  }
  return seconds_since(first);
}

}  // namespace jaccl
