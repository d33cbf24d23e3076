// The pipelined chunk engine: the one loop every algorithm runs on.
//
// An algorithm describes a collective as phases of tasks. A task moves
// `count` elements from its sources to its sinks, chunk by chunk. A source or
// sink is local memory (a Region) or a stream over a Channel. Per chunk the
// task combines its sources in the order listed and writes the result to every
// sink: a reduction of several sources, or a copy of one source's bits (-0 and
// NaN payloads unchanged; converted between T and its accumulator type where
// the endpoints' types differ), in every kind: an operand on its way to the
// rank that folds it, or a result on its way from it, arrives as it left, as
// XLA's own folds see them (a group of one folds its operand alone, in run.cc).
// Frames are used in place: a reduction reads a received frame and writes
// straight into the frame it forwards, so no staging copies exist.
//
// Schedule: within a phase every task advances one chunk whenever its inputs
// are there and its outputs have room, round-robin, so sends to and receives
// from all peers are in flight at once, each with up to num_slots frames.
// Tasks of a phase that share a channel interleave their frames by chunk:
// chunk 0 of each in task order, then chunk 1 of each, and so on. Both ends
// list a channel's tasks in the same order, so they agree on every frame, and
// a ring step can forward chunk c while the step before it still sends chunk
// c+1 (sequential tasks would deadlock once a block outgrows the channel).
// `after` lists tasks that must stay ahead of this one element for element
// (a send that must read a buffer before a reduction overwrites it). Phases
// run one after another.
//
// Single copy between processes of one host (engine_single_copy.h; the reads
// themselves: transport/shm/single_copy.h): a task marked `single_copy`, whose
// one source is contiguous local memory and whose one sink is a stream alone on
// its channel in the phase, sends one frame
// with the source's address instead of its bytes (kFrameAddress) when the
// receiver's process can read this one's memory and the stream carries at least
// JACCL_SINGLE_COPY_MIN_KB; in a reducing kind only to a device of its own
// process. The receiving task (marked too; the stream alone on its channel) takes
// either form: a copy (one source, one local sink) copies the bytes out of the
// sender's memory, a chunk per step; a fold takes such an operand, from a device
// of its own process only, where it lies (the call's type, even where the stream
// in frames would carry its accumulator type); a copy converts nothing so. The
// fold may write its result to a stream as well as to local memory. The sender's
// memory must stay as it is until the receiver is done (the algorithm sees to it
// until the call's last phase: e.g. it is overwritten only with what the
// receiver sends after its reads), so after its last phase the call runs one
// more: every receiver of an address sends its sender a one-element
// acknowledgement, and the sender waits for it. A call that fails raises its
// process's abort board before XLA may free or reuse its memory, so the
// receiver, after its last read, checks that the sender's process has not
// failed.
//
// Waiting: when no task can move, the thread sleeps on its doorbell; every
// ~10 ms without progress it checks the deadline, the peers' processes and
// the abort board, and throws an Error naming the ranks it waits for. Every
// received frame's header is checked against what this rank expects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/kinds.h"
#include "collectives/region.h"
#include "comm/communicator.h"
#include "common/clock.h"
#include "common/dtype.h"
#include "common/reduce.h"
#include "transport/frame.h"

namespace jaccl {

class World;

struct Endpoint {
  Channel* channel = nullptr;  // a stream when set, local memory otherwise
  Region memory;
  Dtype dtype = Dtype::kF32;   // element type at this endpoint (T or its accumulator)
  int peer = -1;               // the rank at the other end of the stream
  uint32_t tag = 0;            // the stream's name within the collective
  bool running = false;        // a task's first source: a fold's running value, to go on with
                               // (common/reduce.h, Operand::running)

  static Endpoint local(const Region& region, Dtype dtype) {
    Endpoint e;
    e.memory = region;
    e.dtype = dtype;
    return e;
  }
  static Endpoint stream(Channel* channel, int peer, uint32_t tag, Dtype dtype) {
    Endpoint e;
    e.channel = channel;
    e.peer = peer;
    e.tag = tag;
    e.dtype = dtype;
    return e;
  }
};

struct Task {
  std::vector<Endpoint> srcs;
  std::vector<Endpoint> sinks;
  size_t count = 0;
  std::vector<int> after;  // indices of tasks (same phase) to stay behind, element for element
  size_t* delivered = nullptr;  // if set, kept equal to the elements done (for IdleWork)
  // If set, the task does no element at or past *limit until it grows (a sink that takes
  // elements only as fast as IdleWork frees room in it, e.g. a ring of rows).
  const size_t* limit = nullptr;
  // Sender: the source stays unchanged until the receiver is done with it, so the receiver
  // may read it in place; receiver: its streams may come as addresses ("Single copy" above).
  bool single_copy = false;
};

using Phase = std::vector<Task>;

// One collective as the engine and its frame headers see it.
struct Call {
  World* world = nullptr;
  Communicator* comm = nullptr;
  Communicator::Member* member = nullptr;
  CollectiveKind kind = CollectiveKind::kAllReduce;
  Algorithm algorithm = Algorithm::kAuto;
  Dtype dtype = Dtype::kF32;
  ReduceOp op = ReduceOp::kSum;
  uint64_t op_count = 0;   // elements of this rank's input; all ranks must agree
  uint32_t seq = 0;
  uint32_t site = 0;       // common/call_sites.h; all ranks must agree
  double timeout_s = 120;
};

// Local work the engine does whenever no task can move (e.g. reducing rows that are
// already here while the network drains). step() does a bounded slice and returns false
// when it could do nothing; the engine then waits for a peer. A task held back by its
// `limit` waits for step() alone, so step() must raise the limit whenever it can.
class IdleWork {
 public:
  virtual ~IdleWork() = default;
  virtual bool step() = 0;
};

void run_phases(const Call& call, std::vector<Phase>& phases, IdleWork* idle = nullptr);

// Whether a stream of `bytes` from rank `from` to rank `to` of the call's group goes as an
// address ("Single copy" above): the setting allows it and the receiver's process can read the
// sender's. The sender's choice: a receiving task marked single_copy takes either form.
bool single_copy_stream(const Call& call, int from, int to, size_t bytes);
// Waits, up to `seconds`, until no device of this process reads memory that another one lent
// in place ("Single copy" above); a call that fails calls it after raising its process's abort
// board (after which no such read starts), before XLA may free its buffers.
void await_local_reads(double seconds);
// JACCL_SINGLE_COPY_MIN_KB in bytes; 0: never.
void set_single_copy_min_bytes(int64_t bytes);
// Streams this process received as addresses and read in place, since it started.
uint64_t streams_read_in_place();

}  // namespace jaccl
