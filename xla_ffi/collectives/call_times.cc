#include "collectives/call_times.h"

#include <atomic>
#include <mutex>
#include <utility>

namespace jaccl {
namespace {

std::atomic<bool> keeping{false};
std::mutex mutex;
std::map<int64_t, std::vector<double>>& kept() {
  static auto* times = new std::map<int64_t, std::vector<double>>;  // outlives exit's threads
  return *times;
}

}  // namespace

void keep_call_times(bool on) {
  std::lock_guard<std::mutex> lock(mutex);
  kept().clear();
  keeping.store(on, std::memory_order_relaxed);
}

void record_call_time(int64_t device, double seconds) {
  if (!keeping.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(mutex);
  kept()[device].push_back(seconds);
}

std::map<int64_t, std::vector<double>> take_call_times() {
  std::lock_guard<std::mutex> lock(mutex);
  std::map<int64_t, std::vector<double>> taken;
  taken.swap(kept());
  return taken;
}

}  // namespace jaccl
