#include "collectives/engine.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <optional>
#include <thread>

#include "collectives/waiter.h"
#include "comm/world.h"
#include "common/call_sites.h"
#include "common/error.h"
#include "common/text.h"
#include "transport/shm/single_copy.h"

namespace jaccl {
namespace {

std::atomic<int64_t> min_single_copy_bytes{256 * 1024};
std::atomic<uint64_t> streams_in_place{0};
std::atomic<int> local_reads{0};  // reads in flight of memory lent by a device of this process

// The process of the call's group's rank `rank` (the call has a World).
int process_of(const Call& call, int rank) {
  return call.world->device(call.member->devices[rank]).process;
}

// Brackets one step's reads of memory that another device of this process lent in place. None
// starts once this process raised its abort board: the lender's call may have failed and XLA
// freed its buffers. A failing call raises the board, then waits for the reads in flight
// (await_local_reads), so none outlives the memory (the counter's increment and the board's
// raise are each followed by a full fence before the other's load).
class LocalRead {
 public:
  explicit LocalRead(const World& world) {
    local_reads.fetch_add(1);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (world.aborted()) {
      local_reads.fetch_sub(1);
      world.check_aborts({});
    }
  }
  ~LocalRead() { local_reads.fetch_sub(1, std::memory_order_release); }
  LocalRead(const LocalRead&) = delete;
  LocalRead& operator=(const LocalRead&) = delete;
};

// Streams whose bytes went as an address (engine.h, "Single copy"), to acknowledge after the
// last phase: `owed` the ranks whose memory this rank read, `awaited` those that read its own.
struct Acks {
  std::vector<int> owed, awaited;
};

constexpr uint32_t kAckTag = 0xff000000u;  // above every algorithm's stream_tag()

std::string describe_frame(const FrameHeader& h) {
  return text(kind_name(static_cast<CollectiveKind>(h.kind)), " #", h.seq, " of ",
              dtype_name(static_cast<Dtype>(h.dtype)), "[", h.op_count, "] (",
              op_shown(static_cast<CollectiveKind>(h.kind), h.redop),
              algorithm_name(static_cast<Algorithm>(h.algorithm)), ", communicator ", hex(h.comm),
              ")", at_site(h.site), ", stream ", h.tag, " of ", h.stream_count, " elements at ",
              h.offset, (h.flags & kFrameAddress) ? " (its address)" : "");
}

struct TaskState {
  Task* task = nullptr;
  size_t done = 0;
  size_t chunk = 0;
  size_t chunks_done = 0;
  std::vector<int> orders;  // the ChannelOrders of the channels this task uses
  std::vector<const Frame*> in_frames;
  std::vector<Frame*> out_frames;
  std::vector<Operand> operands;
  std::vector<void*> sink_ptrs;
  std::vector<int> src_orders;  // by source: the ChannelOrder of its stream (-1: local memory)
  bool sends_address = false;   // sends one frame with its source's address, not the bytes
  std::vector<char> may_read;   // by source: its stream may come as an address ...
  std::vector<char> reading;    // ... and did: the elements are read in the sender's memory,
  std::vector<AddressPayload> from;  // there
  bool complete() const { return done == task->count; }
  // A copy whose one stream came as an address: it copies the bytes out of the sender's memory.
  bool copies_in_place() const { return reading.size() == 1 && reading[0]; }
  // A fold some of whose operands came so: it reads them where they lie (in this process).
  bool folds_in_place() const {
    return reading.size() > 1 && std::find(reading.begin(), reading.end(), 1) != reading.end();
  }
  size_t num_chunks() const { return (task->count + chunk - 1) / chunk; }
};

// The order of frames on one channel (one direction) within a phase: chunk 0
// of every task that uses it, in task order, then chunk 1 of each, and so on.
// Both ends list their tasks for a channel in the same order with the same
// counts, so they agree on which frame comes next. A cursor walks the order.
struct ChannelOrder {
  std::vector<int> tasks;
  std::vector<size_t> chunks;  // chunks of each task
  size_t chunk = 0;            // cursor: chunk index ...
  size_t pos = 0;              // ... and position in `tasks`

  void settle() {  // moves the cursor onto a task that still has chunk `chunk`
    for (;;) {
      while (pos < tasks.size() && chunks[pos] <= chunk) ++pos;
      if (pos < tasks.size()) return;
      bool any_left = false;
      for (size_t c : chunks) any_left |= c > chunk + 1;
      if (!any_left) {
        pos = tasks.size();
        chunk = SIZE_MAX;
        return;
      }
      ++chunk;
      pos = 0;
    }
  }
  bool turn_of(int task) const { return pos < tasks.size() && tasks[pos] == task; }
  void advance() {
    ++pos;
    settle();
  }
};

class PhaseRunner {
 public:
  PhaseRunner(const Call& call, Phase& phase, const Deadline& deadline, IdleWork* idle,
              Acks* acks)
      : call_(call), deadline_(deadline), idle_(idle), acks_(acks), states_(phase.size()) {
    std::map<std::pair<Channel*, bool>, int> order_of;
    for (size_t i = 0; i < phase.size(); ++i) {
      TaskState& s = states_[i];
      Task& t = phase[i];
      s.task = &t;
      size_t wire_bytes = 0, capacity = 0;
      std::vector<std::pair<Channel*, bool>> channels;
      s.src_orders.assign(t.srcs.size(), -1);
      auto visit = [&](const Endpoint& e, bool is_sink) {
        if (e.channel == nullptr) return;
        size_t bytes = dtype_size(e.dtype);
        JACCL_CHECK(wire_bytes == 0 || wire_bytes == bytes, "mixed wire types in one task");
        wire_bytes = bytes;
        capacity = e.channel->payload_capacity();
        channels.emplace_back(e.channel, is_sink);
      };
      for (const Endpoint& e : t.srcs) visit(e, false);
      for (const Endpoint& e : t.sinks) visit(e, true);
      s.chunk = std::max<size_t>(1, wire_bytes ? capacity / wire_bytes : t.count);
      if (t.count > 0) {
        for (const auto& key : channels) {
          auto it = order_of.find(key);
          if (it == order_of.end()) {
            it = order_of.emplace(key, static_cast<int>(orders_.size())).first;
            orders_.emplace_back();
          }
          ChannelOrder& order = orders_[it->second];
          order.tasks.push_back(static_cast<int>(i));
          order.chunks.push_back(s.num_chunks());
          s.orders.push_back(it->second);
        }
        for (size_t k = 0, c = 0; k < t.srcs.size(); ++k) {
          if (t.srcs[k].channel != nullptr) s.src_orders[k] = s.orders[c++];
        }
      }
      s.in_frames.assign(t.srcs.size(), nullptr);
      s.out_frames.assign(t.sinks.size(), nullptr);
      s.operands.resize(t.srcs.size());
      s.sink_ptrs.resize(t.sinks.size());
      s.may_read.assign(t.srcs.size(), 0);
      s.reading.assign(t.srcs.size(), 0);
      s.from.resize(t.srcs.size());
    }
    for (TaskState& s : states_) choose_single_copy(s);
    for (ChannelOrder& order : orders_) order.settle();
  }

  void run() {
    Waiter waiter(call_, deadline_);
    for (;;) {
      uint32_t seen = waiter.doorbell_seq();
      bool all_complete = true, progressed = false;
      blocked_.clear();
      for (TaskState& s : states_) {
        if (s.complete()) continue;
        if (step(s)) progressed = true;
        if (!s.complete()) all_complete = false;
      }
      if (all_complete) return;
      if (progressed || (idle_ != nullptr && idle_->step())) {
        waiter.progressed();
      } else {
        waiter.idle(seen, blocked_);
      }
    }
  }


 private:
  // Marks a task that sends its stream as an address or may receive some (engine.h, "Single
  // copy"); a sender's stream becomes one frame. A copy reads the sender's memory wherever its
  // process may; a fold reads an operand where it lies, so only a device of its own process
  // offers it one, and in a reducing kind addresses go to such devices alone.
  void choose_single_copy(TaskState& s) {
    const Task& t = *s.task;
    if (!t.single_copy || acks_ == nullptr || t.count == 0) return;
    auto alone = [&](int order) { return order >= 0 && orders_[order].tasks.size() == 1; };
    if (t.srcs.size() == 1 && t.srcs[0].channel == nullptr && t.sinks.size() == 1 &&
        t.sinks[0].channel != nullptr) {
      const Endpoint& src = t.srcs[0];
      const Endpoint& sink = t.sinks[0];
      size_t run = 0;
      src.memory.at(0, &run);
      // the address lends elements of the call's type; a fold reads them so whatever type its
      // stream would carry in frames (e.g. the accumulator type, to fold with partial sums)
      if (src.dtype != call_.dtype || (sink.dtype != call_.dtype && !reduces(call_.kind)) ||
          !alone(s.orders[0]) ||
          run < t.count ||
          !single_copy_stream(call_, call_.member->rank, sink.peer,
                              t.count * dtype_size(call_.dtype)) ||
          (reduces(call_.kind) && !in_this_process(sink.peer))) {
        return;
      }
      s.sends_address = true;
      s.chunk = t.count;
      orders_[s.orders[0]].chunks[0] = 1;
      return;
    }
    // A copy writes one local sink; a fold writes its sinks wherever they are.
    const bool copy = t.srcs.size() == 1;
    if (copy && (t.sinks.size() != 1 || t.sinks[0].channel != nullptr)) return;
    for (size_t k = 0; k < t.srcs.size(); ++k) {
      const Endpoint& e = t.srcs[k];
      if (e.channel != nullptr && alone(s.src_orders[k]) &&
          (copy ? e.dtype == call_.dtype : in_this_process(e.peer))) {
        s.may_read[k] = 1;
      }
    }
  }

  bool in_this_process(int rank) const {
    return call_.world != nullptr && process_of(call_, rank) == call_.world->my_process();
  }

  // Throws unless the frame is the next of stream `e`: elements [offset, offset + n), or,
  // with kFrameAddress in `flags`, the address of them all.
  void check_frame(const Frame* frame, const Endpoint& e, const Task& t, size_t offset, size_t n,
                   uint32_t flags = 0) const {
    const FrameHeader& h = frame->header;
    const Communicator::Member& m = *call_.member;
    bool same_call = h.magic == kFrameMagic && h.comm == static_cast<uint32_t>(call_.comm->id()) &&
                     h.seq == call_.seq && h.site == call_.site &&
                     h.kind == static_cast<uint8_t>(call_.kind) &&
                     h.dtype == static_cast<uint8_t>(call_.dtype) &&
                     h.redop == static_cast<uint8_t>(call_.op) &&
                     h.algorithm == static_cast<uint8_t>(call_.algorithm) &&
                     h.op_count == call_.op_count && h.src_rank == static_cast<uint32_t>(e.peer);
    bool same_stream = h.tag == e.tag && h.stream_count == t.count && h.offset == offset &&
                       h.flags == flags &&
                       h.nbytes == (flags & kFrameAddress ? sizeof(AddressPayload)
                                                          : n * dtype_size(e.dtype));
    if (same_call && same_stream) return;
    if (h.magic != kFrameMagic) {
      throw_error(ErrorKind::kMismatch, "corrupt frame from ", describe_rank(call_, e.peer), " to ",
                  describe_rank(call_, m.rank), " in ", describe_call(call_));
    }
    FrameHeader expected = h;
    expected.comm = static_cast<uint32_t>(call_.comm->id());
    expected.seq = call_.seq;
    expected.site = call_.site;
    expected.kind = static_cast<uint8_t>(call_.kind);
    expected.dtype = static_cast<uint8_t>(call_.dtype);
    expected.redop = static_cast<uint8_t>(call_.op);
    expected.algorithm = static_cast<uint8_t>(call_.algorithm);
    expected.op_count = call_.op_count;
    expected.tag = e.tag;
    expected.stream_count = t.count;
    expected.offset = offset;
    expected.flags = flags;
    throw_error(ErrorKind::kMismatch, "ranks disagree: ", describe_rank(call_, m.rank), " is in ",
                describe_frame(expected), " but ", describe_rank(call_, e.peer), " sent ",
                describe_frame(h), disagreement_advice(call_.site, h.site));
  }

  // A step that cannot move gives back the frames it peeked (of its first `peeked` sources):
  // a shared channel lends a frame in place only while its reader uses it.
  static void give_back(const TaskState& s, size_t peeked) {
    for (size_t k = 0; k < peeked; ++k) {
      if (s.task->srcs[k].channel != nullptr && !s.reading[k]) s.task->srcs[k].channel->unpeek();
    }
  }

  // Advances `s` by one chunk; false when an input or output is not ready. It holds no frame
  // of a channel (peeked or reserved) after it returns.
  bool step(TaskState& s) {
    Task& t = *s.task;
    const size_t a = s.done, n = std::min(s.chunk, t.count - a), b = a + n;
    const int self = static_cast<int>(&s - states_.data());
    for (int o : s.orders) {
      if (!orders_[o].turn_of(self)) return false;
    }
    for (int j : t.after) {
      const TaskState& d = states_[j];
      if (d.done < std::min(b, d.task->count)) return false;
    }
    if (s.sends_address) return send_address(s);
    if (s.copies_in_place()) {
      read_in_place(s, a, n);
      finish_step(s, b);
      return true;
    }
    for (size_t i = 0; i < t.srcs.size(); ++i) {
      const Endpoint& e = t.srcs[i];
      if (e.channel == nullptr || s.reading[i]) continue;
      const Frame* f = e.channel->try_peek();
      if (f == nullptr) {
        give_back(s, i);
        blocked_.push_back(e.peer);
        return false;
      }
      if (s.may_read[i] && a == 0 && (f->header.flags & kFrameAddress)) {
        give_back(s, i);
        take_address(s, i, f);
        return true;
      }
      check_frame(f, e, t, a, n);
      s.in_frames[i] = f;
    }
    for (size_t i = 0; i < t.sinks.size(); ++i) {
      const Endpoint& e = t.sinks[i];
      if (e.channel == nullptr) continue;
      Frame* f = e.channel->try_reserve();
      if (f == nullptr) {
        for (size_t k = 0; k < i; ++k) {  // nothing written yet: a shared channel stays free
          if (t.sinks[k].channel != nullptr) t.sinks[k].channel->unreserve();
        }
        give_back(s, t.srcs.size());
        blocked_.push_back(e.peer);
        return false;
      }
      s.out_frames[i] = f;
    }
    {
      std::optional<LocalRead> lent;
      if (s.folds_in_place()) lent.emplace(*call_.world);
      compute(s, a, n);
    }
    for (size_t i = 0; i < t.sinks.size(); ++i) {
      const Endpoint& e = t.sinks[i];
      if (e.channel == nullptr) continue;
      fill_header(s.out_frames[i]->header, e, t, a, n * dtype_size(e.dtype), 0);
      e.channel->commit();
    }
    for (size_t i = 0; i < t.srcs.size(); ++i) {
      if (t.srcs[i].channel != nullptr && !s.reading[i]) t.srcs[i].channel->release();
    }
    if (b == t.count) check_senders_alive(s);
    finish_step(s, b);
    return true;
  }

  void fill_header(FrameHeader& h, const Endpoint& e, const Task& t, size_t offset,
                   size_t nbytes, uint32_t flags) const {
    h.magic = kFrameMagic;
    h.comm = static_cast<uint32_t>(call_.comm->id());
    h.seq = call_.seq;
    h.kind = static_cast<uint8_t>(call_.kind);
    h.dtype = static_cast<uint8_t>(call_.dtype);
    h.redop = static_cast<uint8_t>(call_.op);
    h.algorithm = static_cast<uint8_t>(call_.algorithm);
    h.src_rank = static_cast<uint32_t>(call_.member->rank);
    h.tag = e.tag;
    h.op_count = call_.op_count;
    h.stream_count = t.count;
    h.offset = offset;
    h.nbytes = static_cast<uint32_t>(nbytes);
    h.site = call_.site;
    h.lane = call_.comm->frame_lane();
    h.flags = flags;
  }

  void finish_step(TaskState& s, size_t b) {
    s.done = b;
    if (s.task->delivered != nullptr) *s.task->delivered = b;
    ++s.chunks_done;
    for (int o : s.orders) orders_[o].advance();
  }

  // The one frame of a stream sent as an address; the receiver's acknowledgement is awaited
  // after the last phase.
  bool send_address(TaskState& s) {
    const Task& t = *s.task;
    const Endpoint& e = t.sinks[0];
    Frame* f = e.channel->try_reserve();
    if (f == nullptr) {
      blocked_.push_back(e.peer);
      return false;
    }
    size_t run = 0;
    AddressPayload p{};
    p.address = reinterpret_cast<uint64_t>(t.srcs[0].memory.at(0, &run));
    p.bytes = t.count * dtype_size(call_.dtype);
    p.pid = static_cast<int32_t>(getpid());
    std::memcpy(f->payload(), &p, sizeof p);
    fill_header(f->header, e, t, 0, sizeof p, kFrameAddress);
    e.channel->commit();
    acks_->awaited.push_back(e.peer);
    finish_step(s, t.count);
    return true;
  }

  // Source i's stream came as an address: the frame is taken. In the steps that follow (each
  // advances the channel's order as a frame would) a copy copies the bytes out of the sender's
  // memory chunk by chunk, and a fold reads the operand where it lies.
  void take_address(TaskState& s, size_t i, const Frame* f) {
    const Task& t = *s.task;
    const Endpoint& e = t.srcs[i];
    check_frame(f, e, t, 0, t.count, kFrameAddress);
    AddressPayload& from = s.from[i];
    std::memcpy(&from, f->payload(), sizeof from);
    e.channel->release();
    if (from.bytes != t.count * dtype_size(call_.dtype)) {
      throw_error(ErrorKind::kMismatch, "ranks disagree: ", describe_rank(call_, e.peer),
                  " offered ", from.bytes, " bytes in place where ",
                  describe_rank(call_, call_.member->rank), " expects ",
                  t.count * dtype_size(call_.dtype), " in ", describe_call(call_));
    }
    if (t.srcs.size() > 1 && from.pid != getpid()) {
      throw_error(ErrorKind::kInternal, describe_rank(call_, e.peer), " offered an operand of ",
                  describe_call(call_), " in place from another process");
    }
    s.reading[i] = 1;
    acks_->owed.push_back(e.peer);
    streams_in_place.fetch_add(1, std::memory_order_relaxed);
  }

  void read_in_place(TaskState& s, size_t a, size_t n) {
    const Task& t = *s.task;
    const size_t esize = dtype_size(call_.dtype);
    std::vector<iovec>& runs = runs_;
    runs.clear();
    for (size_t p = 0; p < n;) {
      size_t run = 0;
      char* at = t.sinks[0].memory.at(a + p, &run);
      run = std::min(run, n - p);
      runs.push_back(iovec{at, run * esize});
      p += run;
    }
    std::optional<LocalRead> lent;
    if (s.from[0].pid == getpid()) lent.emplace(*call_.world);
    try {
      read_from_process(s.from[0].pid, s.from[0].address + a * esize, n * esize, runs,
                        describe_rank(call_, t.srcs[0].peer));
    } catch (const Error&) {
      check_senders_alive(s);  // a sender that failed meanwhile is the error to report
      throw;
    }
    if (a + n == t.count) check_senders_alive(s);
  }

  // After the last read of memory that senders lent in place: a sender whose call failed
  // meanwhile (it raises its abort board before XLA may free or reuse the memory) may have
  // left other bytes there, so the reads count only if none had.
  void check_senders_alive(const TaskState& s) const {
    std::vector<int> processes;
    for (size_t i = 0; i < s.reading.size(); ++i) {
      if (!s.reading[i]) continue;
      processes.push_back(process_of(call_, s.task->srcs[i].peer));
    }
    if (!processes.empty()) call_.world->check_aborts(processes);
  }

  // Combines elements [a, a + n) of the task's sources into its sinks, one
  // contiguous run at a time (strided regions break a chunk into runs).
  void compute(TaskState& s, size_t a, size_t n) {
    Task& t = *s.task;
    size_t p = 0;
    while (p < n) {
      size_t run = n - p;
      for (size_t i = 0; i < t.srcs.size(); ++i) {
        const Endpoint& e = t.srcs[i];
        if (s.reading[i]) {  // lent elements of the call's type, whatever the stream's
          const char* lent = reinterpret_cast<const char*>(s.from[i].address);
          s.operands[i] = Operand{lent + (a + p) * dtype_size(call_.dtype), call_.dtype};
        } else if (e.channel) {
          s.operands[i] = Operand{s.in_frames[i]->payload() + p * dtype_size(e.dtype), e.dtype,
                                  e.running};
        } else {
          size_t r;
          s.operands[i] = Operand{e.memory.at(a + p, &r), e.dtype, e.running};
          run = std::min(run, r);
        }
      }
      for (size_t i = 0; i < t.sinks.size(); ++i) {
        const Endpoint& e = t.sinks[i];
        if (e.channel) {
          s.sink_ptrs[i] = s.out_frames[i]->payload() + p * dtype_size(e.dtype);
        } else {
          size_t r;
          s.sink_ptrs[i] = e.memory.at(a + p, &r);
          run = std::min(run, r);
        }
      }
      const Endpoint& first = t.sinks[0];
      if (s.operands.size() == 1) {
        convert(call_.dtype, s.sink_ptrs[0], first.dtype, s.operands[0].data,
                s.operands[0].dtype, run);
      } else {
        combine(call_.op, call_.dtype, s.sink_ptrs[0], first.dtype, s.operands.data(),
                static_cast<int>(s.operands.size()), run);
      }
      for (size_t i = 1; i < t.sinks.size(); ++i) {
        convert(call_.dtype, s.sink_ptrs[i], t.sinks[i].dtype, s.sink_ptrs[0], first.dtype, run);
      }
      p += run;
    }
  }

  const Call& call_;
  const Deadline& deadline_;
  IdleWork* idle_;
  Acks* acks_;  // null: no stream goes as an address (the acknowledgements' own phase)
  std::vector<TaskState> states_;
  std::vector<iovec> runs_;
  std::vector<ChannelOrder> orders_;
  std::vector<int> blocked_;
};

// After the last phase, the acknowledgements of streams sent as addresses: one element (of
// zeros) from each reader to the sender it read, which may then let its memory change.
void acknowledge(const Call& call, const Acks& acks, const Deadline& deadline) {
  static const unsigned char zeros[16] = {};
  const size_t esize = dtype_size(call.dtype);
  std::vector<unsigned char> received(esize * acks.awaited.size());
  Phase phase;
  for (int peer : acks.owed) {
    Task t;
    t.count = 1;
    t.srcs = {Endpoint::local(Region::contiguous(zeros, esize, 1), call.dtype)};
    t.sinks = {Endpoint::stream(call.member->to[peer], peer, kAckTag, call.dtype)};
    phase.push_back(std::move(t));
  }
  for (size_t i = 0; i < acks.awaited.size(); ++i) {
    const int peer = acks.awaited[i];
    Task t;
    t.count = 1;
    t.srcs = {Endpoint::stream(call.member->from[peer], peer, kAckTag, call.dtype)};
    t.sinks = {Endpoint::local(Region::contiguous(received.data() + i * esize, esize, 1),
                               call.dtype)};
    phase.push_back(std::move(t));
  }
  PhaseRunner(call, phase, deadline, nullptr, nullptr).run();
}

}  // namespace

void run_phases(const Call& call, std::vector<Phase>& phases, IdleWork* idle) {
  Deadline deadline(call.timeout_s);
  Acks acks;
  for (Phase& phase : phases) {
    for (Task& t : phase) {
      JACCL_CHECK(!t.srcs.empty() && !t.sinks.empty(), "task without source or sink");
    }
    PhaseRunner(call, phase, deadline, idle, &acks).run();
  }
  if (!acks.owed.empty() || !acks.awaited.empty()) acknowledge(call, acks, deadline);
}

bool single_copy_stream(const Call& call, int from, int to, size_t bytes) {
  const int64_t min = min_single_copy_bytes.load(std::memory_order_relaxed);
  if (min <= 0 || bytes < static_cast<size_t>(min) || call.world == nullptr) return false;
  const World& w = *call.world;
  return w.readable(process_of(call, to), process_of(call, from));
}

void await_local_reads(double seconds) {
  const Deadline deadline(seconds);
  while (local_reads.load() != 0 && !deadline.expired()) std::this_thread::yield();
}

void set_single_copy_min_bytes(int64_t bytes) { min_single_copy_bytes.store(bytes); }

uint64_t streams_read_in_place() { return streams_in_place.load(); }

}  // namespace jaccl
