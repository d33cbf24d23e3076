#include "collectives/engine.h"

#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "collectives/engine_single_copy.h"
#include "collectives/waiter.h"
#include "comm/world.h"
#include "common/call_sites.h"
#include "common/error.h"
#include "common/text.h"

namespace jaccl {
namespace {

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
  // Marks a task that sends its stream as an address (one frame) or may receive some
  // (engine_single_copy.h).
  void choose_single_copy(TaskState& s) {
    const Task& t = *s.task;
    if (!t.single_copy || acks_ == nullptr || t.count == 0) return;
    auto alone = [&](int order) { return order >= 0 && orders_[order].tasks.size() == 1; };
    if (lends(call_, t, !s.orders.empty() && alone(s.orders[0]))) {
      s.sends_address = true;
      s.chunk = t.count;
      orders_[s.orders[0]].chunks[0] = 1;
      return;
    }
    for (size_t k = 0; k < t.srcs.size(); ++k) {
      if (may_take_address(call_, t, k, alone(s.src_orders[k]))) s.may_read[k] = 1;
    }
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
    if (t.limit != nullptr && b > *t.limit) return false;  // IdleWork frees room
    if (s.sends_address) return send_address(s);
    if (s.copies_in_place()) {
      read_lent(call_, t, s.from[0], a, n, s.reading, runs_);
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
    if (b == t.count) check_lenders_alive(call_, t, s.reading);
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
    h.channel_stream = call_.comm->channel_stream();
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
    const AddressPayload p = lend(call_, t);
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
    std::memcpy(&s.from[i], f->payload(), sizeof s.from[i]);
    e.channel->release();
    accept_address(call_, t, i, s.from[i]);
    s.reading[i] = 1;
    acks_->owed.push_back(e.peer);
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
  if (!acks.owed.empty() || !acks.awaited.empty()) {
    std::vector<unsigned char> received;
    Phase phase = acknowledgements(call, acks, received);
    PhaseRunner(call, phase, deadline, nullptr, nullptr).run();
  }
}

}  // namespace jaccl
