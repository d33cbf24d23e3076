// Monotonic time and deadlines.
#pragma once

#include <chrono>

namespace jaccl {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A point in time after which a wait gives up.
class Deadline {
 public:
  explicit Deadline(double seconds)
      : end_(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(seconds))),
        seconds_(seconds) {}
  bool expired() const { return Clock::now() >= end_; }
  double seconds() const { return seconds_; }
  Clock::time_point end() const { return end_; }

 private:
  Clock::time_point end_;
  double seconds_;
};

}  // namespace jaccl
