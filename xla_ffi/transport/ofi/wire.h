// What the OFI transport puts on the wire besides frames: the 32-bit immediate of every
// write (verbs and efa carry 4 bytes of CQ data, so it fits in 4), and where writes land.
//
// Immediate: bit 31 says what arrived (0: a data frame, 1: a credit), bits 16-30 which
// channel of the target process (its index among that process's incoming channels for
// data, outgoing channels for credits), bits 0-15 a count modulo 2^16: the frame's number
// for data, the number of frames the consumer has released for a credit. A receiver
// rebuilds the full count from the one it expects (counts only grow, and at most
// `slots` < 2^14 frames of a channel are ever outstanding), so writes may arrive in any order.
//
// Receive arena of a process, registered for remote writes: kScratchBytes that credits land
// in (their bytes are ignored), then one ring of `slots` frames per incoming channel.
#pragma once

#include <cstddef>
#include <cstdint>

namespace jaccl::ofi {

constexpr uint32_t kCreditBit = 1u << 31;
constexpr uint32_t kMaxChannels = 1u << 15;
constexpr int kMaxSlots = 1 << 14;
constexpr size_t kScratchBytes = 4096;

struct Immediate {
  bool credit;
  uint32_t channel;
  uint16_t count;
};

inline uint32_t encode(const Immediate& i) {
  return (i.credit ? kCreditBit : 0u) | ((i.channel & (kMaxChannels - 1)) << 16) | i.count;
}

inline Immediate decode(uint64_t data) {
  const auto word = static_cast<uint32_t>(data);
  return Immediate{(word & kCreditBit) != 0, (word >> 16) & (kMaxChannels - 1),
                   static_cast<uint16_t>(word & 0xffff)};
}

// The full count whose low 16 bits are `low`, at or after `base`.
inline uint32_t unwrap(uint32_t base, uint16_t low) {
  return base + static_cast<uint16_t>(low - static_cast<uint16_t>(base));
}

}  // namespace jaccl::ofi
