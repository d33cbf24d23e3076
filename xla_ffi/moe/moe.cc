#include "moe/moe.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <string>
#include <type_traits>
#include <vector>

#include "collectives/streams.h"
#include "comm/world.h"
#include "common/error.h"
#include "common/half.h"
#include "common/memory.h"
#include "common/vector_clones.h"

namespace jaccl {
namespace {

std::atomic<MoeSchedule> schedule_setting{MoeSchedule::kRemoteFirst};
std::atomic<int> local_delay_us{0};
std::atomic<uint64_t> streams_ringed{0};

// Peers in the order their streams are listed: under remote-first, other hosts, then other
// processes of this host, then devices of this process (rank order within each group).
std::vector<int> peer_order(const Call& call, MoeSchedule schedule) {
  const Communicator::Member& m = *call.member;
  std::vector<int> peers;
  for (int q = 0; q < m.size; ++q) {
    if (q != m.rank) peers.push_back(q);
  }
  if (schedule == MoeSchedule::kRemoteFirst) {
    World& world = *call.world;
    auto distance = [&](int q) {
      const DeviceInfo& d = world.device(m.devices[q]);
      if (!world.same_host(d.process)) return 0;
      return d.process == world.my_process() ? 2 : 1;
    };
    std::stable_sort(peers.begin(), peers.end(),
                     [&](int a, int b) { return distance(a) < distance(b); });
  }
  return peers;
}

// Checks a list against its capacity and the rows it may name: bad lists are an error,
// never an out-of-bounds access.
void check_list(const Call& call, const int32_t* rows, const int32_t* offsets, size_t capacity,
                size_t limit, const char* what) {
  const int n = call.member->size;
  if (offsets[0] != 0) throw_error(ErrorKind::kInvalidArgument, what, " offsets must start at 0");
  for (int q = 0; q < n; ++q) {
    if (offsets[q + 1] < offsets[q] || static_cast<size_t>(offsets[q + 1]) > capacity) {
      throw_error(ErrorKind::kInvalidArgument, what, " offsets are not increasing within ",
                  capacity, " entries (rank ", q, ")");
    }
  }
  for (int32_t i = 0; i < offsets[n]; ++i) {
    if (rows[i] < 0 || static_cast<size_t>(rows[i]) >= limit) {
      throw_error(ErrorKind::kInvalidArgument, what, " row ", rows[i], " out of range [0, ",
                  limit, ")");
    }
  }
}

// A request's routing lists (moe/moe.h), by what they are.
struct RowLists {
  const int32_t* send_rows;
  const int32_t* send_offsets;  // group size + 1 entries
  size_t send_capacity;         // entries send_rows may hold
  const int32_t* recv_rows;
  const int32_t* recv_offsets;
  size_t recv_capacity;
};

RowLists lists_of(const MoeRequest& c) {
  return RowLists{c.lists[kSendRows], c.lists[kSendOffsets], c.list_counts[kSendRows],
                  c.lists[kRecvRows], c.lists[kRecvOffsets], c.list_counts[kRecvRows]};
}

size_t listed(const int32_t* offsets, int q) {
  return static_cast<size_t>(offsets[q + 1] - offsets[q]);
}

template <typename T>
float to_f32(T v) {
  if constexpr (std::is_same_v<T, bf16_t> || std::is_same_v<T, f16_t>) return to_float(v);
  else return static_cast<float>(v);
}

template <typename T>
T from_f32(float v) {
  if constexpr (std::is_same_v<T, bf16_t>) return to_bf16(v);
  else if constexpr (std::is_same_v<T, f16_t>) return to_f16(v);
  else return static_cast<T>(v);
}

template <typename Fn>
void dispatch_float(Dtype dtype, Fn&& fn) {
  switch (dtype) {
    case Dtype::kF32: return fn(float{});
    case Dtype::kBF16: return fn(bf16_t{});
    case Dtype::kF16: return fn(f16_t{});
    default:
      throw_error(ErrorKind::kInvalidArgument, "MoE combine supports float32, bfloat16 and "
                  "float16, not ", dtype_name(dtype));
  }
}

// A ring's places at least (RowRings): a few frames' worth, well within a core's share of cache.
constexpr size_t kRingBytes = 2u << 20;

// The most rows one pass of a token's weighted sum reads side by side.
constexpr int kRowsAtOnce = 8;

// One pass of a token's weighted sum over n elements, R rows side by side: each element's
// running value (float32, in a register) starts from acc_in (a partial sum) or, where there is
// none, from w[0] * rows[0], adds w[j] * rows[j] for the rows in order, and ends in `out` as the
// row type (the token's result) or in acc_out (a partial sum; it may be acc_in). Every element
// sees the same additions in the same order as row-by-row passes would, so the bits do not
// depend on how rows are grouped into passes. Reading the rows side by side keeps R streams from
// memory in flight where row-by-row passes over a line of floats keep one: the combine at T = H =
// 4096, K = 8, 2 processes took 32-33 ms against 47-53 ms row by row (2026-12-07).
template <typename T, int R, bool kFromAcc, bool kToOut>
void sum_pass(const float* acc_in, const float* w, const void* const* rows, size_t n,
              float* acc_out, T* out) {
  const T* r[R > 0 ? R : 1];
  float wr[R > 0 ? R : 1];
  for (int j = 0; j < R; ++j) {
    r[j] = static_cast<const T*>(rows[j]);
    wr[j] = w[j];
  }
  for (size_t i = 0; i < n; ++i) {
    float a;
    if constexpr (kFromAcc) {
      a = acc_in[i];
    } else {
      a = wr[0] * to_f32(r[0][i]);
    }
    for (int j = kFromAcc ? 0 : 1; j < R; ++j) a += wr[j] * to_f32(r[j][i]);
    if constexpr (kToOut) {
      out[i] = from_f32<T>(a);
    } else {
      acc_out[i] = a;
    }
  }
}

template <typename T, bool kFromAcc, bool kToOut>
void sum_pass_of(const float* acc_in, const float* w, const void* const* rows, int count,
                 size_t n, float* acc_out, T* out) {
  switch (count) {
    case 0:  // a partial sum that only needs storing
      if constexpr (kFromAcc) return sum_pass<T, 0, true, kToOut>(acc_in, w, rows, n, acc_out, out);
      break;
    case 1: return sum_pass<T, 1, kFromAcc, kToOut>(acc_in, w, rows, n, acc_out, out);
    case 2: return sum_pass<T, 2, kFromAcc, kToOut>(acc_in, w, rows, n, acc_out, out);
    case 3: return sum_pass<T, 3, kFromAcc, kToOut>(acc_in, w, rows, n, acc_out, out);
    case 4: return sum_pass<T, 4, kFromAcc, kToOut>(acc_in, w, rows, n, acc_out, out);
    case 5: return sum_pass<T, 5, kFromAcc, kToOut>(acc_in, w, rows, n, acc_out, out);
    case 6: return sum_pass<T, 6, kFromAcc, kToOut>(acc_in, w, rows, n, acc_out, out);
    case 7: return sum_pass<T, 7, kFromAcc, kToOut>(acc_in, w, rows, n, acc_out, out);
    case 8: return sum_pass<T, 8, kFromAcc, kToOut>(acc_in, w, rows, n, acc_out, out);
    default: break;
  }
  throw_error(ErrorKind::kInternal, "MoE combine: a pass of ", count, " rows");
}

// A pass of a token's weighted sum (sum_pass) for any of the row types, `count` (<=
// kRowsAtOnce) rows, from a partial sum where acc_in is given, to `out` where it is given (else
// to acc_out): the combine's hot loop, compiled for wider vectors where the CPU has them.
JACCL_VECTOR_CLONES void sum_rows(Dtype dtype, const float* acc_in, const float* w,
                                  const void* const* rows, int count, size_t n, float* acc_out,
                                  void* out) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out);
    if (acc_in != nullptr) {
      if (o != nullptr) return sum_pass_of<T, true, true>(acc_in, w, rows, count, n, acc_out, o);
      return sum_pass_of<T, true, false>(acc_in, w, rows, count, n, acc_out, o);
    }
    if (o != nullptr) return sum_pass_of<T, false, true>(acc_in, w, rows, count, n, acc_out, o);
    return sum_pass_of<T, false, false>(acc_in, w, rows, count, n, acc_out, o);
  });
}

// R dot products of one token at once: out[j] = <dout, rows[j]> for j < R, each summed over
// the elements in ascending order in float32 (the order the GPU kernel and the reference use,
// so the bits are theirs). One running sum waits on each addition; R of them side by side are
// independent chains the core runs at once (the weights' gradient at T = H = 4096, K = 8 spent
// 55% of its time in one chain per pair).
template <typename T, int R>
void dots(const T* dout, const void* const* rows, size_t n, float* out) {
  const T* r[R];
  float sum[R];
  for (int j = 0; j < R; ++j) {
    r[j] = static_cast<const T*>(rows[j]);
    sum[j] = 0.0f;
  }
  for (size_t i = 0; i < n; ++i) {
    const float d = to_f32(dout[i]);
    for (int j = 0; j < R; ++j) sum[j] = sum[j] + d * to_f32(r[j][i]);
  }
  for (int j = 0; j < R; ++j) out[j] = sum[j];
}

template <typename T>
void dots_of(const T* dout, const void* const* rows, int count, size_t n, float* out) {
  switch (count) {
    case 1: return dots<T, 1>(dout, rows, n, out);
    case 2: return dots<T, 2>(dout, rows, n, out);
    case 3: return dots<T, 3>(dout, rows, n, out);
    case 4: return dots<T, 4>(dout, rows, n, out);
    case 5: return dots<T, 5>(dout, rows, n, out);
    case 6: return dots<T, 6>(dout, rows, n, out);
    case 7: return dots<T, 7>(dout, rows, n, out);
    case 8: return dots<T, 8>(dout, rows, n, out);
    default: break;
  }
  throw_error(ErrorKind::kInternal, "MoE pair dot: ", count, " dots at once");
}

// out[t, k] = <dout[t], row(t, k)> (dots above), 0 for pairs without a row, for the tokens
// [t0, t1): the weights' gradient, up to kRowsAtOnce pairs of a token at once, compiled for
// wider vectors where the CPU has them.
JACCL_VECTOR_CLONES void pair_dots(Dtype dtype, const MoeRequest& c,
                                   const std::vector<const void*>& pair_rows, size_t t0,
                                   size_t t1) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const size_t h = c.row_elems, topk = static_cast<size_t>(c.topk);
    const T* dout = static_cast<const T*>(c.extra);
    float* out = static_cast<float*>(c.out);
    for (size_t t = t0; t < t1; ++t) {
      const void* rows[kRowsAtOnce];
      size_t at[kRowsAtOnce];
      int count = 0;
      auto flush = [&] {
        float sums[kRowsAtOnce];
        dots_of(dout + t * h, rows, count, h, sums);
        for (int j = 0; j < count; ++j) out[at[j]] = sums[j];
        count = 0;
      };
      for (size_t k = 0; k < topk; ++k) {
        const size_t p = t * topk + k;
        out[p] = 0.0f;
        if (pair_rows[p] == nullptr) continue;
        rows[count] = pair_rows[p];
        at[count++] = p;
        if (count == kRowsAtOnce) flush();
      }
      if (count > 0) flush();
    }
  });
}

// Whether every other rank's stream lists this rank's pairs in increasing order (token, then k):
// what moe_routing.py's lists do, and what rings need (RowRings).
bool in_pair_order(const RowLists& lists, const Communicator::Member& m) {
  for (int q = 0; q < m.size; ++q) {
    if (q == m.rank) continue;
    for (int32_t i = lists.recv_offsets[q] + 1; i < lists.recv_offsets[q + 1]; ++i) {
      if (lists.recv_rows[i] <= lists.recv_rows[i - 1]) return false;
    }
  }
  return true;
}

// Where each (token, k) pair's row is, and whether it has arrived: local rows (this rank's
// experts) are always there; a remote row is there once its stream delivered it.
struct PairRows {
  std::vector<const void*> row;     // nullptr: the pair has no row (masked or dropped)
  std::vector<int> stream;          // -1: local, else the peer whose stream carries it
  std::vector<size_t> index;        // position in that stream, in rows
  std::vector<size_t> delivered;    // per peer: elements its stream delivered so far
  size_t row_elems = 0;

  bool here(size_t p) const {
    return stream[p] < 0 || index[p] < delivered[stream[p]] / row_elems;
  }
};

// Rings of rows: where a peer's stream brings its rows token by token (moe_routing.py lists a
// rank's rows in its senders' pair order), they land in a ring of `rows` rows instead of a
// stretch of the staging area as long as the stream, and are summed (or dotted) while the ring
// still holds them, in cache. Staged whole, written into memory and read back later, a combine
// at T = H = 4096 (2 processes) took 36.7-40.8 ms, through rings 30.1-31.4 ms. The stream's
// receiving task takes elements up to `limit`; a row's place is free once its token's sum has
// passed it.
struct RowRings {
  size_t rows = 0;                    // places in each ring
  std::vector<const int32_t*> pairs;  // per peer: its pairs in stream order (nullptr: no ring)
  std::vector<size_t> count;          // per peer: rows its stream brings
  std::vector<size_t> freed;          // per peer: leading rows whose places are free
  std::vector<size_t> limit;          // per peer: elements its receiving task may take
};

// The weighted sum out[t] = sum over k ascending of w[t,k] * row(t,k) (or, for the weights'
// gradient, a token's dots once all its rows are here), advanced token by token as far as the
// rows in k order are here: while the network drains (IdleWork) under
// remote-first, at the end under arrival. The order of additions never changes, so the
// result does not depend on when rows arrive.
class StreamingCombine : public IdleWork {
 public:
  // `rings`: the rows of some peers come through rings; then tokens advance in order.
  StreamingCombine(const Call& call, const MoeRequest& c, const PairRows& pairs,
                   std::vector<float>& accumulator, RowRings* rings)
      : call_(call), request_(c), pairs_(pairs), acc_(accumulator), rings_(rings),
        weights_(static_cast<const float*>(c.extra)), out_(static_cast<char*>(c.out)),
        tokens_(c.out_rows), topk_(static_cast<size_t>(c.topk)), h_(c.row_elems),
        line_(c.row_elems), next_k_(c.out_rows, 0), started_(c.out_rows, 0) {
    // JACCL_MOE_LOCAL_DELAY_US (benchmarks only): a pause per token advanced, emulating a
    // host slower at its local work.
    delay_us_ = local_delay_us.load(std::memory_order_relaxed);
    if (!c.pair_dot) acc_.resize(tokens_ * h_);
    if (rings_ == nullptr) {
      for (size_t t = 0; t < tokens_; ++t) pending_.push_back(t);
    }
  }

  // Advances up to kSlice tokens; false when none of them could move.
  bool step() override {
    if (rings_ != nullptr) return step_in_order();
    bool moved = false;
    for (size_t visited = 0; visited < kSlice && !pending_.empty(); ++visited) {
      if (cursor_ >= pending_.size()) cursor_ = 0;
      const size_t t = pending_[cursor_];
      moved |= advance(t);
      if (next_k_[t] == topk_) {
        pending_[cursor_] = pending_.back();
        pending_.pop_back();
      } else {
        ++cursor_;
      }
    }
    return moved;
  }

  void finish() {
    for (size_t t = 0; t < tokens_; ++t) {
      if (next_k_[t] < topk_) advance(t);
    }
    pending_.clear();
  }

 private:
  static constexpr size_t kSlice = 32;

  // With rings: the tokens in order from the first unfinished one, as far as their rows are
  // here, then the places of the rows summed are freed. The first unfinished token always gets
  // its rows in the end: every row before it in a stream is summed and freed, so each ring has
  // room for the token's own rows (a ring holds at least K rows past two chunks of its stream).
  bool step_in_order() {
    bool moved = false;
    for (size_t n = 0; n < kSlice && first_ < tokens_; ++n) {
      const size_t t = first_;
      moved |= advance(t);
      if (next_k_[t] < topk_) break;
      ++first_;
    }
    if (moved) free_places();
    return moved;
  }

  void free_places() {
    RowRings& r = *rings_;
    for (size_t q = 0; q < r.pairs.size(); ++q) {
      if (r.pairs[q] == nullptr) continue;
      size_t f = r.freed[q];
      for (; f < r.count[q]; ++f) {
        const size_t p = static_cast<size_t>(r.pairs[q][f]);
        if (next_k_[p / topk_] <= p % topk_) break;  // its token's sum has not passed it
      }
      r.freed[q] = f;
      r.limit[q] = std::min(r.count[q], f + r.rows) * h_;
    }
  }

  // A token advances in passes of up to kRowsAtOnce rows (sum_rows), over its rows in k order
  // as far as they are here. Its last pass writes the result; a token that has to wait for a
  // row keeps its partial sum in its accumulator row. A token whose remaining rows are all here
  // and span several passes keeps it in a line that stays in cache instead.
  bool advance(size_t t) {
    const size_t h = h_, k0 = next_k_[t];
    if (delay_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us_));
    if (request_.pair_dot) {  // the weights' gradient: a token's dots once its rows are here
      if (!all_here(t)) return false;
      pair_dots(call_.dtype, request_, pairs_.row, t, t + 1);
      next_k_[t] = static_cast<uint32_t>(topk_);
      return true;
    }
    float* acc = started_[t] || !all_here(t) ? acc_.data() + t * h : line_.data();
    char* out = out_ + t * h * dtype_size(call_.dtype);
    size_t k = k0;
    for (;;) {
      const void* rows[kRowsAtOnce];
      float w[kRowsAtOnce];
      int count = 0;
      bool waits = false;
      for (; k < topk_ && count < kRowsAtOnce; ++k) {
        const size_t p = t * topk_ + k;
        if (pairs_.row[p] == nullptr) continue;
        if (!pairs_.here(p)) {
          waits = true;
          break;
        }
        rows[count] = pairs_.row[p];
        w[count++] = weights_[p];
      }
      const bool done = k == topk_;
      if (count > 0 || (done && started_[t])) {
        sum_rows(call_.dtype, started_[t] ? acc : nullptr, w, rows, count, h, acc,
                 done ? out : nullptr);
        started_[t] = 1;
      } else if (done) {
        std::memset(out, 0, h * dtype_size(call_.dtype));  // no pair of the token has a row
      }
      if (done || waits) break;
    }
    next_k_[t] = static_cast<uint32_t>(k);
    return next_k_[t] != k0;
  }

  bool all_here(size_t t) const {
    for (size_t k = next_k_[t]; k < topk_; ++k) {
      const size_t p = t * topk_ + k;
      if (pairs_.row[p] != nullptr && !pairs_.here(p)) return false;
    }
    return true;
  }

  const Call& call_;
  const MoeRequest& request_;
  const PairRows& pairs_;
  std::vector<float>& acc_;
  RowRings* rings_;
  const float* weights_;  // [tokens, topk]
  char* out_;
  const size_t tokens_, topk_, h_;
  std::vector<float> line_;
  std::vector<uint32_t> next_k_;
  std::vector<uint8_t> started_;
  std::vector<size_t> pending_;
  size_t cursor_ = 0;
  size_t first_ = 0;  // with rings: the first unfinished token
  int delay_us_ = 0;
};

}  // namespace

MoeSchedule moe_schedule() { return schedule_setting.load(std::memory_order_relaxed); }

void set_moe_schedule(MoeSchedule schedule) {
  schedule_setting.store(schedule, std::memory_order_relaxed);
}

MoeSchedule parse_moe_schedule(const std::string& name) {
  if (name == "remote_first") return MoeSchedule::kRemoteFirst;
  if (name == "arrival") return MoeSchedule::kArrival;
  throw_error(ErrorKind::kInvalidArgument, "JACCL_MOE_SCHEDULE must be remote_first or arrival, "
              "not '", name, "'");
}

void set_moe_local_delay_us(int delay_us) {
  local_delay_us.store(delay_us, std::memory_order_relaxed);
}

uint64_t moe_streams_through_rings() { return streams_ringed.load(std::memory_order_relaxed); }

void moe_dispatch(Call& call, const MoeRequest& c, MoeSchedule schedule) {
  const RowLists lists = lists_of(c);
  const void* src = c.rows;
  void* dst = c.out;
  const size_t dst_rows = c.out_rows, row_elems = c.row_elems;
  check_list(call, lists.send_rows, lists.send_offsets, lists.send_capacity, c.rows_count, "send");
  check_list(call, lists.recv_rows, lists.recv_offsets, lists.recv_capacity, dst_rows, "receive");
  const int me = call.member->rank;
  if (listed(lists.send_offsets, me) != listed(lists.recv_offsets, me)) {
    throw_error(ErrorKind::kInvalidArgument, "rows kept on this rank disagree: ",
                listed(lists.send_offsets, me), " sent, ", listed(lists.recv_offsets, me),
                " received");
  }
  const Dtype elem = call.dtype;
  const size_t esize = dtype_size(elem), row_bytes = row_elems * esize;
  // Zero only the rows nobody writes (the padding), in runs: zero_fill hands whole pages
  // of them back to the kernel instead of faulting them in to write zeros.
  prefer_huge_pages(dst, dst_rows * row_bytes);
  std::vector<uint8_t> written(dst_rows, 0);
  for (int32_t i = 0; i < lists.recv_offsets[call.member->size]; ++i) written[lists.recv_rows[i]] = 1;
  for (size_t r = 0; r < dst_rows;) {
    if (written[r]) {
      ++r;
      continue;
    }
    size_t end = r;
    while (end < dst_rows && !written[end]) ++end;
    zero_fill(static_cast<char*>(dst) + r * row_bytes, (end - r) * row_bytes);
    r = end;
  }
  auto rows_of = [&](const void* base, const int32_t* rows, const int32_t* offsets, int q) {
    return Region::row_list(base, esize, row_elems, rows + offsets[q], listed(offsets, q));
  };
  Phase phase;
  std::vector<Task> receives;
  for (int q : peer_order(call, schedule)) {
    Task send;
    send.count = listed(lists.send_offsets, q) * row_elems;
    send.srcs = {Endpoint::local(rows_of(src, lists.send_rows, lists.send_offsets, q), elem)};
    send.sinks = {send_to(call, q, stream_tag(1, 0, q), elem)};
    Task receive;
    receive.count = listed(lists.recv_offsets, q) * row_elems;
    receive.srcs = {receive_from(call, q, stream_tag(1, 0, me), elem)};
    receive.sinks = {Endpoint::local(rows_of(dst, lists.recv_rows, lists.recv_offsets, q), elem)};
    phase.push_back(std::move(send));
    if (schedule == MoeSchedule::kRemoteFirst) {
      receives.push_back(std::move(receive));
    } else {
      phase.push_back(std::move(receive));
    }
  }
  for (Task& t : receives) phase.push_back(std::move(t));
  Task keep;  // rows for this rank's own experts: a local copy
  keep.count = listed(lists.send_offsets, me) * row_elems;
  keep.srcs = {Endpoint::local(rows_of(src, lists.send_rows, lists.send_offsets, me), elem)};
  keep.sinks = {Endpoint::local(rows_of(dst, lists.recv_rows, lists.recv_offsets, me), elem)};
  phase.push_back(std::move(keep));
  std::vector<Phase> phases{std::move(phase)};
  run_phases(call, phases);
}

void moe_combine(Call& call, const MoeRequest& c, MoeSchedule schedule) {
  const RowLists lists = lists_of(c);
  const size_t tokens = c.out_rows, topk = static_cast<size_t>(c.topk), h = c.row_elems;
  const size_t pairs = tokens * topk;
  check_list(call, lists.send_rows, lists.send_offsets, lists.send_capacity, c.rows_count, "send");
  check_list(call, lists.recv_rows, lists.recv_offsets, lists.recv_capacity, pairs, "receive");
  const Communicator::Member& m = *call.member;
  const int me = m.rank;
  if (listed(lists.send_offsets, me) != listed(lists.recv_offsets, me)) {
    throw_error(ErrorKind::kInvalidArgument, "rows kept on this rank disagree");
  }
  const Dtype elem = call.dtype;
  const size_t esize = dtype_size(elem), row_bytes = h * esize;
  const auto* y = static_cast<const char*>(c.rows);
  prefer_huge_pages(c.out, tokens * (c.pair_dot ? topk * sizeof(float) : row_bytes));

  // Where each pair's row will be: in y (this rank's experts) or in the staging area.
  PairRows pairs_at;
  pairs_at.row.assign(pairs, nullptr);
  pairs_at.stream.assign(pairs, -1);
  pairs_at.index.assign(pairs, 0);
  pairs_at.delivered.assign(m.size, 0);
  pairs_at.row_elems = std::max<size_t>(h, 1);
  for (int32_t i = 0; i < lists.recv_offsets[me + 1] - lists.recv_offsets[me]; ++i) {
    pairs_at.row[lists.recv_rows[lists.recv_offsets[me] + i]] =
        y + static_cast<size_t>(lists.send_rows[lists.send_offsets[me] + i]) * row_bytes;
  }
  // The other ranks' rows: in rings (RowRings) where ranks of this host bring them token by
  // token under remote-first, else one after another in the staging area (at[q]: the first of
  // rank q's places there, in rows).
  const std::vector<int> peers = peer_order(call, schedule);
  RowRings rings;
  const bool ringed = schedule == MoeSchedule::kRemoteFirst && m.num_hosts == 1 && h > 0 &&
                      in_pair_order(lists, m);
  std::vector<int32_t> ring_places;  // place of each row of a stream in its ring
  if (ringed) {
    size_t chunk_rows = 0, longest = 0;
    for (int q : peers) {
      chunk_rows = std::max(chunk_rows, m.from[q]->payload_capacity() / row_bytes + 2);
      longest = std::max(longest, listed(lists.recv_offsets, q));
    }
    rings.rows = std::max(kRingBytes / row_bytes, 2 * chunk_rows + topk);
    rings.pairs.assign(m.size, nullptr);
    rings.count.assign(m.size, 0);
    rings.freed.assign(m.size, 0);
    rings.limit.assign(m.size, 0);
    ring_places.resize(longest);
    for (size_t i = 0; i < longest; ++i) ring_places[i] = static_cast<int32_t>(i % rings.rows);
  }
  std::vector<size_t> at(m.size, 0);
  size_t places = 0;
  for (int q : peers) {
    at[q] = places;
    const size_t n = listed(lists.recv_offsets, q);
    places += ringed ? std::min(n, rings.rows) : n;
  }
  Communicator::Member& member = *call.member;
  if (member.scratch.size() < places * row_bytes) member.scratch.resize(places * row_bytes);
  char* staging = member.scratch.data();

  // remote-first: one phase (sends to other hosts listed first), local rows reduced while
  // the network drains. arrival: rows go out in rank order and this rank reduces its local
  // rows where it stands in that order: sends to lower ranks, local work, then the rest.
  Phase early_sends, phase;
  std::vector<Task> receives;
  for (int q : peers) {
    Task send;
    send.count = listed(lists.send_offsets, q) * h;
    send.srcs = {Endpoint::local(Region::row_list(y, esize, h,
                                                  lists.send_rows + lists.send_offsets[q],
                                                  listed(lists.send_offsets, q)), elem)};
    send.sinks = {send_to(call, q, stream_tag(2, 0, q), elem)};
    const bool early = schedule == MoeSchedule::kArrival && q < me;
    const size_t n = listed(lists.recv_offsets, q);
    const int32_t* pairs_of_q = lists.recv_rows + lists.recv_offsets[q];
    char* first = staging + at[q] * row_bytes;
    Task receive;
    receive.count = n * h;
    receive.srcs = {receive_from(call, q, stream_tag(2, 0, me), elem)};
    receive.delivered = &pairs_at.delivered[q];
    if (ringed) {
      receive.sinks = {Endpoint::local(Region::row_list(first, esize, h, ring_places.data(), n),
                                       elem)};
      rings.pairs[q] = pairs_of_q;
      rings.count[q] = n;
      rings.limit[q] = std::min(n, rings.rows) * h;
      receive.limit = &rings.limit[q];
      if (n > 0) streams_ringed.fetch_add(1, std::memory_order_relaxed);
    } else {
      receive.sinks = {Endpoint::local(Region::contiguous(first, esize, receive.count), elem)};
    }
    for (size_t i = 0; i < n; ++i) {
      const size_t p = pairs_of_q[i];
      pairs_at.row[p] = first + (ringed ? i % rings.rows : i) * row_bytes;
      pairs_at.stream[p] = q;
      pairs_at.index[p] = i;
    }
    (early ? early_sends : phase).push_back(std::move(send));
    if (schedule == MoeSchedule::kRemoteFirst) {
      receives.push_back(std::move(receive));
    } else {
      phase.push_back(std::move(receive));
    }
  }
  for (Task& t : receives) phase.push_back(std::move(t));
  std::vector<Phase> first{std::move(early_sends)}, rest{std::move(phase)};

  if (c.pair_dot && !ringed) {  // the weights' gradient: every pair once everything is here
    run_phases(call, first);
    run_phases(call, rest);
    pair_dots(elem, c, pairs_at.row, 0, tokens);
    return;
  }
  StreamingCombine reduce(call, c, pairs_at, member.accumulator, ringed ? &rings : nullptr);
  if (schedule == MoeSchedule::kArrival) {
    run_phases(call, first);
    while (reduce.step()) {
    }
    run_phases(call, rest);
  } else {
    run_phases(call, rest, &reduce);
  }
  reduce.finish();
}

}  // namespace jaccl
