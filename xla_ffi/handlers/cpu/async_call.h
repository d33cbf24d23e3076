// How a CPU handler gives XLA its call: as an ffi::Future, so XLA:CPU's dataflow executor runs
// every thunk that does not depend on the call while the call waits on its peers.
//
// Contract: runs_now(device, lane, bytes) tells whether a call of `bytes` in `lane`
// (comm/lanes.h) runs at once on XLA's thread: when asynchronous calls are off, or when it is
// in lane 0, smaller than async_min_bytes() (a thread hop costs more than such a call;
// collectives/device_threads.h) and no earlier call of the lane is still queued (a lane keeps
// XLA's order of its calls); its future is then completed(to_ffi(failure)). Calls of other
// lanes always go to their lane's thread: one that blocked XLA's thread while its peers first
// finish a call of lane 0 could hold up the very compute that call of lane 0 waits for.
// Otherwise queue(device, lane, work) runs `work` (a call of the engine: it returns the failure
// or nothing, and never throws) on the lane's call thread; the future completes from the
// lane's completion thread (XLA then runs the call's dependents there), with the call's error
// if it failed. A queued `work` must own everything it uses: XLA keeps
// the call's buffers alive until the future completes, not its views of them (ffi::AnyBuffer
// points into XLA's call frame) nor the handler's frame.
// completed(error) is the finished future of a call that ran, or failed before it started.
// Every call runs_now() says yes to counts as run at once (collectives/device_threads.h:
// call_counts()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>

#include "collectives/device_threads.h"
#include "collectives/run.h"
#include "handlers/call_setup.h"
#include "xla/ffi/api/ffi.h"

namespace jaccl {

inline xla::ffi::Future completed(xla::ffi::Error error) {
  xla::ffi::Promise promise;
  xla::ffi::Future future(promise);
  if (error.success()) {
    promise.SetAvailable();
  } else {
    promise.SetError(std::move(error));
  }
  return future;
}

inline bool runs_now(int64_t device, uint32_t lane, size_t bytes) {
  const int64_t min_bytes = async_min_bytes();
  const bool now = min_bytes < 0 || (lane == 0 && static_cast<int64_t>(bytes) < min_bytes &&
                                     DeviceThreads::get().idle(device, lane));
  if (now) count_call_run_at_once();  // the caller runs it next
  return now;
}

inline xla::ffi::Future queue(int64_t device, uint32_t lane,
                              std::function<std::optional<Failure>()> work) {
  xla::ffi::Promise promise;
  xla::ffi::Future future(promise);
  DeviceThreads::get().run(device, lane, [device, lane, promise, work = std::move(work)]() mutable {
    std::optional<Failure> failure = work();
    DeviceThreads::get().complete(device, lane, [promise, failure]() mutable {
      if (failure) {
        promise.SetError(to_ffi(failure));
      } else {
        promise.SetAvailable();
      }
    });
  });
  return future;
}

}  // namespace jaccl
