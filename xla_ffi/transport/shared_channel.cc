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

// A stream's frames copied out earlier come first; then the channel's head is lent in place if
// it is this stream's, or copied into its stream's queue if it is another's (so the channel's
// ring never stays full of frames whose reader is busy elsewhere), unless it is lent already.
const Frame* SharedChannel::peek(uint64_t stream) {
  std::lock_guard<std::mutex> lock(consumer_mutex_);
  auto own = queues_.find(stream);
  if (own != queues_.end() && !own->second.empty()) {
    return reinterpret_cast<const Frame*>(own->second.front().get());
  }
  bool for_others = false;
  const Frame* found = nullptr;
  while (const Frame* frame = channel_->try_peek()) {
    const uint64_t owner = stream_of(frame->header.channel_stream, frame->header.src_rank);
    if (owner == stream) {
      lent_to_ = stream;
      found = frame;
      break;
    }
    if (lent_to_ != kNoStream) {  // another stream reads it now: it rings when done
      consumer_waited_ = true;
      break;
    }
    const size_t payload = std::min<size_t>(frame->header.nbytes, channel_->payload_capacity());
    Copy copy = take_copy();
    std::memcpy(copy.get(), frame, sizeof(FrameHeader) + payload);
    queues_[owner].push_back(std::move(copy));
    channel_->release();
    for_others = true;
  }
  if (for_others && consumer_bell_ != nullptr) ring(consumer_bell_);
  return found;
}

void SharedChannel::give_back_lend() {
  lent_to_ = kNoStream;
  if (consumer_waited_) {
    consumer_waited_ = false;
    if (consumer_bell_ != nullptr) ring(consumer_bell_);
  }
}

void SharedChannel::release(uint64_t stream) {
  std::lock_guard<std::mutex> lock(consumer_mutex_);
  if (lent_to_ == stream) {
    channel_->release();
    give_back_lend();
    return;
  }
  auto it = queues_.find(stream);
  if (it == queues_.end() || it->second.empty()) return;
  if (spare_.size() < kSpareCopies) spare_.push_back(std::move(it->second.front()));
  it->second.pop_front();
}

void SharedChannel::unpeek(uint64_t stream) {
  std::lock_guard<std::mutex> lock(consumer_mutex_);
  if (lent_to_ == stream) give_back_lend();
}

}  // namespace jaccl
