// One direction of a network link as a device thread sees it: the Channel contract of the
// link's local ring, plus the link's failure.
//
// Contract: frames go through `ring` unchanged; failure() asks `failure` (called from device
// threads during health checks, so it must be thread-safe). The ring and whatever `failure`
// reads outlive the channel.
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "transport/ring_channel.h"

namespace jaccl {

class LinkChannel : public Channel {
 public:
  LinkChannel(RingChannel* ring, std::function<std::string()> failure, const char* kind)
      : ring_(ring), failure_(std::move(failure)), kind_(kind) {}
  size_t payload_capacity() const override { return ring_->payload_capacity(); }
  Frame* try_reserve() override { return ring_->try_reserve(); }
  void commit() override { ring_->commit(); }
  const Frame* try_peek() override { return ring_->try_peek(); }
  void release() override { ring_->release(); }
  std::string failure() const override { return failure_(); }
  const char* kind() const override { return kind_; }

 private:
  RingChannel* ring_;
  std::function<std::string()> failure_;
  const char* kind_;
};

}  // namespace jaccl
