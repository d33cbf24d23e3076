// A futex doorbell: how a device thread sleeps until a peer has done something.
//
// Contract: a Doorbell lives in memory shared by every process that rings it
// (a shared-memory segment, or the heap for one process). ring() never blocks.
// A waiter reads seq, checks its work, and calls wait(seen) only if nothing
// changed; any ring() after the read of seq wakes it, so no wake-up is lost.
#pragma once

#include <atomic>
#include <cstdint>

namespace jaccl {

struct alignas(64) Doorbell {
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> sleepers;
  // An eventfd (plus one; 0 = none) that ring() also writes: how a transport's I/O
  // thread, which sleeps in epoll, hears a ring. Only for doorbells in private memory.
  int32_t eventfd_plus_one;
};

void ring(Doorbell* bell);

// Returns once bell->seq differs from `seen` or after about max_wait_us
// microseconds (spurious returns are allowed). Spins for spin_us first.
void wait_for_ring(Doorbell* bell, uint32_t seen, int spin_us, int max_wait_us);

}  // namespace jaccl
