#include "transport/shared_channel.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "transport/frame.h"

namespace jaccl {
namespace {
constexpr size_t kSpareCopies = 32;  // frame buffers kept for reuse per channel
}  // namespace

void SharedChannel::FreeBytes::operator()(unsigned char* p) const { std::free(p); }

SharedChannel::SharedChannel(Channel* channel, Doorbell* producer_bell, Doorbell* consumer_bell)
    : channel_(channel),
      producer_bell_(producer_bell),
      consumer_bell_(consumer_bell),
      frame_bytes_((sizeof(FrameHeader) + channel->payload_capacity() + 63) / 64 * 64) {}

SharedChannel::~SharedChannel() = default;

std::unique_ptr<StreamChannel> SharedChannel::stream(uint64_t stream) {
  return std::make_unique<StreamChannel>(*this, stream);
}

// The claim: one stream produces at a time, from its try_reserve() to its commit() (or
// unreserve()). A stream that finds it taken says so before looking once more, so the holder's
// release either comes after that look or rings the producer's doorbell: no wake-up is lost.
Frame* SharedChannel::reserve(StreamChannel* who) {
  StreamChannel* holder = nullptr;
  if (!producer_.compare_exchange_strong(holder, who) && holder != who) {
    producer_waited_.store(true);
    holder = nullptr;
    if (!producer_.compare_exchange_strong(holder, who)) return nullptr;
  }
  Frame* frame = channel_->try_reserve();
  if (frame == nullptr) unreserve(who);  // full: the consumer's release wakes us
  return frame;
}

void SharedChannel::commit(StreamChannel* who) {
  channel_->commit();
  unreserve(who);
}

void SharedChannel::unreserve(StreamChannel* who) {
  StreamChannel* holder = who;
  if (!producer_.compare_exchange_strong(holder, nullptr)) return;
  if (producer_waited_.exchange(false) && producer_bell_ != nullptr) ring(producer_bell_);
}

SharedChannel::Copy SharedChannel::take_copy() {
  if (!spare_.empty()) {
    Copy copy = std::move(spare_.back());
    spare_.pop_back();
    return copy;
  }
  auto* bytes = static_cast<unsigned char*>(std::aligned_alloc(64, frame_bytes_));
  if (bytes == nullptr) throw std::bad_alloc();
  return Copy(bytes);
}

// Every frame that arrived moves to its stream's queue, whichever stream looks: the channel's
// ring never stays full of frames whose reader is busy elsewhere.
const Frame* SharedChannel::peek(uint64_t stream) {
  std::lock_guard<std::mutex> lock(consumer_mutex_);
  bool for_others = false;
  while (const Frame* frame = channel_->try_peek()) {
    const uint64_t owner = stream_of(frame->header.comm, frame->header.src_rank);
    const size_t payload = std::min<size_t>(frame->header.nbytes, channel_->payload_capacity());
    Copy copy = take_copy();
    std::memcpy(copy.get(), frame, sizeof(FrameHeader) + payload);
    queues_[owner].push_back(std::move(copy));
    channel_->release();
    for_others |= owner != stream;
  }
  if (for_others && consumer_bell_ != nullptr) ring(consumer_bell_);
  auto it = queues_.find(stream);
  if (it == queues_.end() || it->second.empty()) return nullptr;
  return reinterpret_cast<const Frame*>(it->second.front().get());
}

void SharedChannel::release(uint64_t stream) {
  std::lock_guard<std::mutex> lock(consumer_mutex_);
  auto it = queues_.find(stream);
  if (it == queues_.end() || it->second.empty()) return;
  if (spare_.size() < kSpareCopies) spare_.push_back(std::move(it->second.front()));
  it->second.pop_front();
}

}  // namespace jaccl
