#include "cuda/stopped_context.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace jaccl::cuda {

void end_after_stopped_context(int64_t device) {
  static std::once_flag started;
  std::call_once(started, [device] {
    std::thread([device] {
      std::this_thread::sleep_for(std::chrono::duration<double>(kStoppedContextGraceSeconds));
      std::fprintf(stderr,
                   "jaccl: the CUDA context of GPU device %lld stopped on the failure above and "
                   "XLA does not return that error to a caller already waiting on the device: "
                   "this process ends (exit status 1)\n",
                   static_cast<long long>(device));
      std::fflush(stderr);
      std::_Exit(1);
    }).detach();
  });
}

}  // namespace jaccl::cuda
