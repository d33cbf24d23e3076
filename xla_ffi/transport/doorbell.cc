#include "transport/doorbell.h"

#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define JACCL_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define JACCL_PAUSE() asm volatile("yield")
#else
#define JACCL_PAUSE() ((void)0)
#endif

namespace jaccl {

void ring(Doorbell* bell) {
  bell->seq.fetch_add(1, std::memory_order_seq_cst);
  if (bell->eventfd_plus_one > 0) eventfd_write(bell->eventfd_plus_one - 1, 1);
  if (bell->sleepers.load(std::memory_order_seq_cst) != 0) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&bell->seq), FUTEX_WAKE, INT32_MAX, nullptr,
            nullptr, 0);
  }
}

void wait_for_ring(Doorbell* bell, uint32_t seen, int spin_us, int max_wait_us) {
  using Clock = std::chrono::steady_clock;
  if (spin_us > 0) {
    auto spin_end = Clock::now() + std::chrono::microseconds(spin_us);
    int rounds = 0;
    while (bell->seq.load(std::memory_order_acquire) == seen) {
      for (int i = 0; i < 32; ++i) JACCL_PAUSE();
      if (++rounds % 16 == 0) {
        sched_yield();
        if (Clock::now() >= spin_end) break;
      }
    }
    if (bell->seq.load(std::memory_order_acquire) != seen) return;
  }
  bell->sleepers.fetch_add(1, std::memory_order_seq_cst);
  if (bell->seq.load(std::memory_order_seq_cst) == seen) {
    timespec timeout{max_wait_us / 1000000, (max_wait_us % 1000000) * 1000L};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&bell->seq), FUTEX_WAIT, seen, &timeout,
            nullptr, 0);
  }
  bell->sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace jaccl
