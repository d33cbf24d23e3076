// How a device thread waits inside a collective: spin briefly, then sleep on its doorbell;
// every ~10 ms without progress check the peers (channel failures, dead or aborted processes)
// and the deadline, and throw an Error that names the call, this rank and whom it waits for
// (at the deadline also the ranks of this host that never reached the call: comm/world.h's
// call boards; with JACCL_EVICT_STALLED their processes are then killed: World::evict(), and
// the processes on other hosts it waits for asked to leave if they never reached it).
//
// Contract: read doorbell_seq() before looking for work; if nothing moved, call
// idle(seen, waiting_for) with the ranks the thread waits on; call progressed() after work.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/engine.h"
#include "common/clock.h"

namespace jaccl {

std::string describe_call(const Call& call);
std::string describe_rank(const Call& call, int rank);
// What ends every "ranks disagree" message; `mine` and `theirs` are the two calls' sites
// (common/call_sites.h): when they differ, it says how collectives written in different
// places come to meet.
std::string disagreement_advice(uint32_t mine, uint32_t theirs);

class Waiter {
 public:
  Waiter(const Call& call, const Deadline& deadline);

  uint32_t doorbell_seq() const;
  void progressed();
  void idle(uint32_t seen, std::vector<int>& waiting_for);

 private:
  void check(std::vector<int>& waiting_for);

  const Call& call_;
  const Deadline& deadline_;
  Clock::time_point last_progress_, last_check_;
};

}  // namespace jaccl
