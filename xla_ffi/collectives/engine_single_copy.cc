#include "collectives/engine_single_copy.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>

#include "collectives/waiter.h"
#include "comm/world.h"
#include "common/error.h"
#include "transport/shm/single_copy.h"

namespace jaccl {
namespace {

std::atomic<int64_t> min_single_copy_bytes{256 * 1024};
std::atomic<uint64_t> streams_in_place{0};
std::atomic<int> local_reads{0};  // reads in flight of memory lent by a device of this process

constexpr uint32_t kAckTag = 0xff000000u;  // above every algorithm's stream_tag()

bool in_this_process(const Call& call, int rank) {
  return call.world != nullptr && process_of(call, rank) == call.world->my_process();
}

}  // namespace

int process_of(const Call& call, int rank) {
  return call.world->device(call.member->devices[rank]).process;
}

LocalRead::LocalRead(const World& world) {
  local_reads.fetch_add(1);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (world.aborted()) {
    local_reads.fetch_sub(1);
    world.check_aborts({});
  }
}

LocalRead::~LocalRead() { local_reads.fetch_sub(1, std::memory_order_release); }

bool lends(const Call& call, const Task& t, bool alone) {
  if (t.srcs.size() != 1 || t.srcs[0].channel != nullptr || t.sinks.size() != 1 ||
      t.sinks[0].channel == nullptr) {
    return false;
  }
  const Endpoint& src = t.srcs[0];
  const Endpoint& sink = t.sinks[0];
  size_t run = 0;
  src.memory.at(0, &run);
  // the address lends elements of the call's type; a fold reads them so whatever type its
  // stream would carry in frames (e.g. the accumulator type, to fold with partial sums)
  return src.dtype == call.dtype && (sink.dtype == call.dtype || reduces(call.kind)) && alone &&
         run >= t.count &&
         single_copy_stream(call, call.member->rank, sink.peer, t.count * dtype_size(call.dtype)) &&
         (!reduces(call.kind) || in_this_process(call, sink.peer));
}

bool may_take_address(const Call& call, const Task& t, size_t k, bool alone) {
  // A copy writes one local sink; a fold writes its sinks wherever they are.
  const bool copy = t.srcs.size() == 1;
  if (copy && (t.sinks.size() != 1 || t.sinks[0].channel != nullptr)) return false;
  const Endpoint& e = t.srcs[k];
  return e.channel != nullptr && alone &&
         (copy ? e.dtype == call.dtype : in_this_process(call, e.peer));
}

AddressPayload lend(const Call& call, const Task& t) {
  size_t run = 0;
  AddressPayload p{};
  p.address = reinterpret_cast<uint64_t>(t.srcs[0].memory.at(0, &run));
  p.bytes = t.count * dtype_size(call.dtype);
  p.pid = static_cast<int32_t>(getpid());
  return p;
}

void accept_address(const Call& call, const Task& t, size_t k, const AddressPayload& from) {
  const Endpoint& e = t.srcs[k];
  if (from.bytes != t.count * dtype_size(call.dtype)) {
    throw_error(ErrorKind::kMismatch, "ranks disagree: ", describe_rank(call, e.peer),
                " offered ", from.bytes, " bytes in place where ",
                describe_rank(call, call.member->rank), " expects ",
                t.count * dtype_size(call.dtype), " in ", describe_call(call));
  }
  if (t.srcs.size() > 1 && from.pid != getpid()) {
    throw_error(ErrorKind::kInternal, describe_rank(call, e.peer), " offered an operand of ",
                describe_call(call), " in place from another process");
  }
  streams_in_place.fetch_add(1, std::memory_order_relaxed);
}

void read_lent(const Call& call, const Task& t, const AddressPayload& from, size_t a, size_t n,
               const std::vector<char>& reading, std::vector<iovec>& runs) {
  const size_t esize = dtype_size(call.dtype);
  runs.clear();
  for (size_t p = 0; p < n;) {
    size_t run = 0;
    char* at = t.sinks[0].memory.at(a + p, &run);
    run = std::min(run, n - p);
    runs.push_back(iovec{at, run * esize});
    p += run;
  }
  std::optional<LocalRead> lent;
  if (from.pid == getpid()) lent.emplace(*call.world);
  try {
    read_from_process(from.pid, from.address + a * esize, n * esize, runs,
                      describe_rank(call, t.srcs[0].peer));
  } catch (const Error&) {
    check_lenders_alive(call, t, reading);  // a sender that failed meanwhile is the error
    throw;
  }
  if (a + n == t.count) check_lenders_alive(call, t, reading);
}

// After the last read of memory that senders lent in place: a sender whose call failed
// meanwhile (it raises its abort board before XLA may free or reuse the memory) may have
// left other bytes there, so the reads count only if none had.
void check_lenders_alive(const Call& call, const Task& t, const std::vector<char>& reading) {
  std::vector<int> processes;
  for (size_t i = 0; i < reading.size(); ++i) {
    if (reading[i]) processes.push_back(process_of(call, t.srcs[i].peer));
  }
  if (!processes.empty()) call.world->check_aborts(processes);
}

Phase acknowledgements(const Call& call, const Acks& acks, std::vector<unsigned char>& received) {
  static const unsigned char zeros[16] = {};
  const size_t esize = dtype_size(call.dtype);
  received.assign(esize * acks.awaited.size(), 0);
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
  return phase;
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
