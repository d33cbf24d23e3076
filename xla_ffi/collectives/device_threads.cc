#include "collectives/device_threads.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

namespace jaccl {
namespace {
std::atomic<int64_t> min_bytes{64 * 1024};
}  // namespace

// One thread and its queue. The thread is detached and its Worker never freed: it sleeps in
// wait() when there is nothing to do, and the process's exit ends it.
struct DeviceThreads::Worker {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<std::function<void()>> jobs;
  bool busy = false;

  Worker() {
    std::thread([this] {
      std::unique_lock<std::mutex> lock(mutex);
      for (;;) {
        ready.wait(lock, [this] { return !jobs.empty(); });
        std::function<void()> job = std::move(jobs.front());
        jobs.pop_front();
        busy = true;
        lock.unlock();
        job();
        lock.lock();
        busy = false;
      }
    }).detach();
  }

  void push(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      jobs.push_back(std::move(job));
    }
    ready.notify_one();
  }

  bool idle() {
    std::lock_guard<std::mutex> lock(mutex);
    return jobs.empty() && !busy;
  }
};

struct DeviceThreads::Lane {
  Worker calls, completions;
};

DeviceThreads& DeviceThreads::get() {
  static DeviceThreads* threads = new DeviceThreads;  // never freed: its threads outlive exit
  return *threads;
}

// The lane's threads, made on first use; with `make` false, nullptr for a lane that has none
// yet (asking whether it is idle starts no thread).
DeviceThreads::Lane* DeviceThreads::lane(int64_t device, uint32_t lane, bool make) {
  static std::mutex mutex;
  static auto* lanes = new std::map<std::pair<int64_t, uint32_t>, std::unique_ptr<Lane>>;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = lanes->find({device, lane});
  if (it != lanes->end()) return it->second.get();
  if (!make) return nullptr;
  std::unique_ptr<Lane>& made = (*lanes)[{device, lane}];
  made = std::make_unique<Lane>();
  return made.get();
}

namespace {
std::atomic<uint64_t> calls_at_once{0};
std::atomic<uint64_t> calls_handed{0};
}  // namespace

void count_call_run_at_once() { calls_at_once.fetch_add(1, std::memory_order_relaxed); }

std::pair<uint64_t, uint64_t> call_counts() { return {calls_at_once.load(), calls_handed.load()}; }

void DeviceThreads::run(int64_t device, uint32_t id, std::function<void()> job) {
  calls_handed.fetch_add(1, std::memory_order_relaxed);
  lane(device, id, true)->calls.push(std::move(job));
}

void DeviceThreads::complete(int64_t device, uint32_t id, std::function<void()> job) {
  lane(device, id, true)->completions.push(std::move(job));
}

bool DeviceThreads::idle(int64_t device, uint32_t id) {
  Lane* l = lane(device, id, false);
  return l == nullptr || l->calls.idle();
}

void set_async_min_bytes(int64_t bytes) { min_bytes.store(bytes); }
int64_t async_min_bytes() { return min_bytes.load(); }

}  // namespace jaccl
