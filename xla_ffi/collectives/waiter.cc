#include "collectives/waiter.h"

#include <algorithm>
#include <optional>

#include "comm/world.h"
#include "common/call_sites.h"
#include "common/error.h"
#include "common/text.h"
#include "transport/doorbell.h"

namespace jaccl {
namespace {
constexpr double kHealthCheckSeconds = 0.01;
constexpr int kMaxSleepUs = 10000;

// The ranks of the call's group on this host that have not entered it (their devices' call
// boards, transport/shm/host_memory.h), each with how far it came: who holds up the others, which
// need not be whom this rank waits for (in a ring, a rank waits for its neighbour, which may
// itself wait for the rank that never came). Ranks on other hosts are not known here.
struct Laggards {
  std::string named;
  std::vector<int> processes;  // theirs, other than this one, each once
};

Laggards never_reached(const Call& call) {
  Laggards laggards;
  if (call.kind == CollectiveKind::kPointToPoint) return laggards;  // numbered per pair
  const Communicator::Member& me = *call.member;
  for (int rank = 0; rank < me.size; ++rank) {
    if (rank == me.rank) continue;
    std::optional<uint32_t> entered = call.world->calls_entered(me.devices[rank], call.comm->id());
    if (!entered.has_value() || *entered > call.seq) continue;
    laggards.named += text(laggards.named.empty() ? "" : "; ", call.comm->describe_rank(me, rank),
                           " never reached this call (it entered ",
                           *entered == 0 ? std::string("none of this group's collectives")
                                         : text("this group's collectives up to #",
                                                *entered - 1, " only"),
                           ")");
    const int process = call.world->device(me.devices[rank]).process;
    if (process != call.world->my_process() &&
        std::find(laggards.processes.begin(), laggards.processes.end(), process) ==
            laggards.processes.end()) {
      laggards.processes.push_back(process);
    }
  }
  return laggards;
}

// With JACCL_EVICT_STALLED, the laggards' processes killed, and each process on another host
// that this rank waits for asked to leave if it never reached the call (its own call board
// decides: World::evict_if_absent()): what the error then says of them.
std::string evicted(const Call& call, const Laggards& laggards,
                    const std::vector<int>& waiting_for) {
  if (!call.world->config().evict_stalled) return "";
  const Communicator::Member& me = *call.member;
  std::string done;
  auto add = [&done](const std::string& one) {
    if (!one.empty()) done += text(done.empty() ? "" : ", ", one);
  };
  for (int process : laggards.processes) add(call.world->evict(process));
  std::vector<int> asked;
  for (int peer : waiting_for) {
    const int process = call.world->device(me.devices[peer]).process;
    // Point-to-point calls are numbered per pair, not per call: no call board to ask about.
    // (A process of this host is asked nothing: request_eviction() says so.)
    if (call.kind == CollectiveKind::kPointToPoint ||
        std::find(asked.begin(), asked.end(), process) != asked.end()) {
      continue;
    }
    asked.push_back(process);
    add(call.world->request_eviction(me.devices[me.rank], me.devices[peer], call.comm->id(),
                                     call.seq));
  }
  return done.empty() ? "" : text("; ", done, " (JACCL_EVICT_STALLED)");
}

}  // namespace

std::string describe_call(const Call& call) {
  return text(kind_name(call.kind), " #", call.seq, " of ", dtype_name(call.dtype), "[",
              call.op_count, "] (", op_shown(call.kind, static_cast<uint8_t>(call.op)),
              algorithm_name(call.algorithm), ")", at_site(call.site));
}

std::string disagreement_advice(uint32_t mine, uint32_t theirs) {
  std::string advice =
      ". Every rank of a group must run the same collectives, in the same order, with the same "
      "shapes, dtypes and options";
  if (mine != theirs) {
    advice +=
        "; these two were written in different places: every process must dispatch its jitted "
        "programs in the same order, and collectives of one program that do not depend on each "
        "other (in different blocks: a nested jit, a loop body, a cond branch) may run in "
        "different orders on different devices unless JACCL_STRICT_ORDER=1 orders them (if "
        "the ranks mean one collective written on different lines, JACCL_CALL_SITES=0 pairs "
        "collectives by order only)";
  }
  return advice;
}

std::string describe_rank(const Call& call, int rank) {
  return call.comm->describe_rank(*call.member, rank);
}

Waiter::Waiter(const Call& call, const Deadline& deadline)
    : call_(call), deadline_(deadline), last_progress_(Clock::now()), last_check_(last_progress_) {}

uint32_t Waiter::doorbell_seq() const {
  return call_.member->doorbell->seq.load(std::memory_order_acquire);
}

void Waiter::progressed() { last_progress_ = Clock::now(); }

void Waiter::idle(uint32_t seen, std::vector<int>& waiting_for) {
  Clock::time_point now = Clock::now();
  if (std::chrono::duration<double>(now - last_check_).count() >= kHealthCheckSeconds) {
    last_check_ = now;
    check(waiting_for);
  }
  int idle_us = static_cast<int>(
      std::chrono::duration_cast<std::chrono::microseconds>(now - last_progress_).count());
  int spin_us = std::max(0, call_.world->config().spin_us - idle_us);
  wait_for_ring(call_.member->doorbell, seen, spin_us, kMaxSleepUs);
}

void Waiter::check(std::vector<int>& waiting_for) {
  const Communicator::Member& me = *call_.member;
  std::sort(waiting_for.begin(), waiting_for.end());
  waiting_for.erase(std::unique(waiting_for.begin(), waiting_for.end()), waiting_for.end());
  std::string waiting;
  for (int peer : waiting_for) {
    Channel* in = me.from[peer];
    Channel* out = me.to[peer];
    std::string failure = in ? in->failure() : std::string();
    if (failure.empty() && out) failure = out->failure();
    if (!failure.empty()) {
      throw_error(ErrorKind::kPeerFailure, "in ", describe_call(call_), " on ",
                  describe_rank(call_, me.rank), ": connection to ", describe_rank(call_, peer),
                  " failed: ", failure);
    }
    waiting += (waiting.empty() ? "" : ", ") + describe_rank(call_, peer);
  }
  try {
    call_.world->check_health(me.processes);
  } catch (const Error& e) {
    throw Error(ErrorKind::kPeerFailure, std::string(e.what()) + " (during " +
                                             describe_call(call_) + " on " +
                                             describe_rank(call_, me.rank) + ")");
  }
  if (deadline_.expired()) {
    const Laggards laggards = never_reached(call_);
    throw_error(ErrorKind::kTimeout, "timed out after ", deadline_.seconds(),
                " s (JACCL_TIMEOUT) in ", describe_call(call_), " on ",
                describe_rank(call_, me.rank), ": ",
                laggards.named.empty() ? "" : laggards.named + "; ", "waiting for ",
                waiting.empty() ? std::string("local work") : waiting,
                evicted(call_, laggards, waiting_for));
  }
}

}  // namespace jaccl
