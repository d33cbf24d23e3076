// Where a device's asynchronous calls run: so that XLA computes what does not depend on a
// collective while the collective waits on its peers, a CPU handler hands its call to the
// device's call thread and returns at once (handlers/cpu/async_call.h).
//
// Contract: every lane (comm/lanes.h) of a local device has two threads of its own, made at its
// first job and never ended (they sleep between jobs; the process's exit takes them): the call
// thread runs the jobs run() hands it, one at a time, in the order handed; the completion
// thread runs complete()'s jobs likewise. A call's job ends by handing its completion to the
// completion thread, because XLA runs whatever depends on the call on the thread that completes
// it: the call thread must not be held by that compute while the lane's next collective waits
// behind it. Lanes of one device share nothing here: a call of one waiting on its peers never
// delays another's. idle(device, lane) tells whether the lane has no job handed and unfinished
// (a caller that runs a call itself keeps the lane's order only then). Thread-safe.
//
// async_min_bytes(): calls of at least this many bytes go to the call thread; -1: none
// (JACCL_ASYNC=0, every call blocks XLA's thread as before). Set by configure().
// call_counts(): how many calls this process's handlers ran on XLA's thread
// (count_call_run_at_once()) and handed to a call thread (run()), since it started: what tests
// read to tell the two ways apart.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

namespace jaccl {

class DeviceThreads {
 public:
  static DeviceThreads& get();

  void run(int64_t device, uint32_t lane, std::function<void()> job);
  void complete(int64_t device, uint32_t lane, std::function<void()> job);
  bool idle(int64_t device, uint32_t lane);

 private:
  DeviceThreads() = default;
  struct Worker;
  struct Lane;
  Lane* lane(int64_t device, uint32_t lane, bool make);
};

void set_async_min_bytes(int64_t bytes);
int64_t async_min_bytes();

void count_call_run_at_once();
std::pair<uint64_t, uint64_t> call_counts();  // (run at once, handed to a call thread)

}  // namespace jaccl
