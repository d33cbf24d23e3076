// The state a group inside one process shares: what each member published for the call
// it is in, and the barrier they meet at (collectives/direct.h runs the schedules on it).
//
// Contract: one DirectGroup per group whose members are all devices of this process, made
// by the Communicator; Entry k is written by member k only (then its `calls` is released),
// read by the others after the barrier.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "transport/doorbell.h"

namespace jaccl {

struct Buffers;

struct DirectGroup {
  explicit DirectGroup(int size) : entries(size) {}

  struct alignas(64) Entry {
    std::atomic<uint32_t> calls{0};  // collectives published so far (seq + 1)
    const void* in = nullptr;
    void* out = nullptr;
    uint64_t in_count = 0, out_count = 0, outer_in = 1, outer_out = 1;
    const Buffers* buffers = nullptr;  // the whole call (ppermute, ragged_all_to_all)
    uint8_t kind = 0, dtype = 0, redop = 0;
    uint32_t site = 0;  // common/call_sites.h
  };
  std::vector<Entry> entries;             // by rank
  alignas(64) std::atomic<uint64_t> arrivals{0};
  std::vector<Doorbell*> doorbells;       // by rank
};

}  // namespace jaccl
