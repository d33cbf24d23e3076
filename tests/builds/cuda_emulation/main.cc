// Runs jaccl's CUDA kernels and peer-path schedules on emulated GPUs (host threads) and checks
// them bit for bit against the CPU engine. Prints one line per failure and a summary; exit
// status 0 only when everything passed. A watchdog ends the run if anything hangs.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include <cuda_runtime.h>

#include "check.h"
#include "common/half.h"

namespace jaccl::emulated {
namespace {

std::mutex failure_mutex;
std::atomic<int> failure_count{0};

}  // namespace

int failures() { return failure_count.load(); }

void record_failure(const std::string& what) {
  std::lock_guard<std::mutex> lock(failure_mutex);
  if (failure_count.fetch_add(1) < 50) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
}

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void fill(Dtype dtype, void* data, size_t count, uint64_t seed) {
  const size_t size = dtype_size(dtype);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t r = mix(seed * 0x100000001b3ull + i);
    // Values in [-4, 4) with a coarse grid, so sums and products stay in range.
    float f = static_cast<float>(static_cast<int64_t>(r % 4096) - 2048) / 512.0f;
    switch (r >> 58) {  // about one element in 16 is special
      case 0: f = -0.0f; break;
      case 1: f = 1.0f / 0.0f; break;
      case 2: f = -1.0f / 0.0f; break;
      case 3: f = 0.0f / 0.0f; break;
      default: break;
    }
    char* p = static_cast<char*>(data) + i * size;
    switch (dtype) {
      case Dtype::kF32: std::memcpy(p, &f, 4); break;
      case Dtype::kF64: { const double d = f * 1.000001; std::memcpy(p, &d, 8); break; }
      case Dtype::kF16: { const uint16_t b = to_f16(f).bits; std::memcpy(p, &b, 2); break; }
      case Dtype::kBF16: { const uint16_t b = to_bf16(f).bits; std::memcpy(p, &b, 2); break; }
      case Dtype::kBool: *p = static_cast<char>(r & 1); break;
      default: std::memcpy(p, &r, size); break;
    }
  }
}

void run_ranks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&fn, r] {
      cudaSetDevice(r);  // emulated GPU r: its own context
      fn(r);
    });
  }
  for (auto& t : threads) t.join();
}

std::string describe(const char* what, int n, Dtype dtype, size_t count, const std::string& extra) {
  return std::string(what) + " n=" + std::to_string(n) + " " + dtype_name(dtype) + "[" +
         std::to_string(count) + "]" + (extra.empty() ? "" : " " + extra);
}

}  // namespace jaccl::emulated

int main() {
  using namespace jaccl::emulated;
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(240));
    std::fprintf(stderr, "FAIL: watchdog: the emulated GPUs hung\n");
    std::fflush(stderr);
    _exit(3);
  }).detach();
  const struct {
    const char* name;
    void (*run)();
  } groups[] = {{"kernels", check_kernels}, {"collectives", check_collectives},
                {"moe", check_moe}, {"failures", check_failures}};
  for (const auto& g : groups) {
    const auto start = std::chrono::steady_clock::now();
    const int before = failures();
    g.run();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%-12s %s (%.1f s)\n", g.name, failures() == before ? "ok" : "FAILED", s);
    std::fflush(stdout);
  }
  std::printf("%s: %d failures\n", failures() == 0 ? "PASSED" : "FAILED", failures());
  return failures() == 0 ? 0 : 1;
}
