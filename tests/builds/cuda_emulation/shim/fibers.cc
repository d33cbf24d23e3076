// The fibers behind cuda_runtime.h's kernel launches.
//
// A block's lanes run round-robin on the launching thread: each lane runs until it returns,
// waits at __syncthreads (released once every lane that has not returned is waiting) or
// yields in __nanosleep. A pass in which every live lane only yielded means the block waits
// for another emulated GPU, so the host thread sleeps a little before the next pass.
#include <ucontext.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "cuda_runtime.h"

namespace jaccl_emu {

thread_local dim3 blockIdx, threadIdx, blockDim, gridDim;

namespace {

constexpr size_t kStackBytes = 128 * 1024;

struct Lane {
  ucontext_t* context = nullptr;
  bool done = false, at_sync = false;
};

struct Block {
  ucontext_t scheduler;
  std::vector<Lane> lanes;
  Lane* current = nullptr;
  LaneBody body = nullptr;
  void* state = nullptr;
  bool trapped = false;
};

thread_local Block* running = nullptr;
thread_local int running_device = 0;
thread_local std::vector<std::unique_ptr<char[]>> stacks;
// One context per lane slot and thread, initialised once: getcontext saves the signal mask (a
// system call, a third of a lane's), makecontext re-aims it at a new lane for every block.
thread_local std::vector<std::unique_ptr<ucontext_t>> contexts;

void lane_entry() {
  Block* b = running;
  b->body(b->state);
  b->current->done = true;  // returning resumes uc_link: the scheduler
}

void switch_to_scheduler() {
  Block* b = running;
  swapcontext(b->current->context, &b->scheduler);
}

void run_block(unsigned threads, LaneBody body, void* state) {
  Block b;
  b.body = body;
  b.state = state;
  b.lanes.resize(threads);
  while (stacks.size() < threads) stacks.emplace_back(new char[kStackBytes]);
  while (contexts.size() < threads) {
    contexts.emplace_back(new ucontext_t);
    getcontext(contexts.back().get());
  }
  for (unsigned i = 0; i < threads; ++i) {
    ucontext_t& c = *contexts[i];
    b.lanes[i].context = &c;
    c.uc_stack.ss_sp = stacks[i].get();
    c.uc_stack.ss_size = kStackBytes;
    c.uc_link = &b.scheduler;
    makecontext(&c, lane_entry, 0);
  }
  running = &b;
  for (;;) {
    unsigned live = 0, waiting = 0, yielded = 0;
    for (unsigned i = 0; i < threads; ++i) {
      Lane& lane = b.lanes[i];
      if (lane.done || lane.at_sync) continue;
      threadIdx = dim3(i);
      b.current = &lane;
      swapcontext(&b.scheduler, lane.context);
      if (b.trapped) {
        mark_lost(running_device);
        running = nullptr;
        return;  // the other lanes' stacks are abandoned, as a trapped grid's are
      }
      if (!lane.done && !lane.at_sync) ++yielded;
    }
    for (const Lane& lane : b.lanes) {
      live += !lane.done;
      waiting += !lane.done && lane.at_sync;
    }
    if (live == 0) break;
    if (waiting == live) {
      for (Lane& lane : b.lanes) lane.at_sync = false;
    } else if (yielded + waiting == live) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  running = nullptr;
}

}  // namespace

void run_grid(int device, dim3 grid, dim3 block, LaneBody body, void* state) {
  running_device = device;
  gridDim = grid;
  blockDim = block;
  for (unsigned b = 0; b < grid.x && !lost_device(device); ++b) {
    blockIdx = dim3(b);
    run_block(block.x, body, state);
  }
}

void yield_lane() { switch_to_scheduler(); }

void sync_lanes() {
  running->current->at_sync = true;
  switch_to_scheduler();
}

void trap_lane() {
  running->trapped = true;
  switch_to_scheduler();
  std::abort();  // never resumed
}

}  // namespace jaccl_emu
