#include "moe/moe.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "collectives/streams.h"
#include "comm/world.h"
#include "common/error.h"
#include "common/half.h"

namespace jaccl {
namespace {

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

// out[t] = sum_k w[t,k] * row(t,k) (float32 accumulation, k ascending), for tokens [t0, t1).
template <typename T>
void weighted_sum(const CombineArgs& a, const std::vector<const void*>& pair_rows, size_t t0,
                  size_t t1, std::vector<float>& acc) {
  const size_t h = a.row_elems;
  acc.resize(h);
  T* out = static_cast<T*>(a.out);
  for (size_t t = t0; t < t1; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (size_t k = 0; k < a.topk; ++k) {
      const T* row = static_cast<const T*>(pair_rows[t * a.topk + k]);
      if (row == nullptr) continue;
      const float w = a.weights[t * a.topk + k];
      for (size_t i = 0; i < h; ++i) acc[i] += w * to_f32(row[i]);
    }
    for (size_t i = 0; i < h; ++i) out[t * h + i] = from_f32<T>(acc[i]);
  }
}

// out[t, k] = <dout[t], row(t, k)> in float32, for tokens [t0, t1).
template <typename T>
void pair_dot(const CombineArgs& a, const std::vector<const void*>& pair_rows, size_t t0,
              size_t t1) {
  const size_t h = a.row_elems;
  const T* dout = static_cast<const T*>(a.dout);
  float* out = static_cast<float*>(a.out);
  for (size_t t = t0; t < t1; ++t) {
    for (size_t k = 0; k < a.topk; ++k) {
      const T* row = static_cast<const T*>(pair_rows[t * a.topk + k]);
      float dot = 0.0f;
      if (row != nullptr) {
        for (size_t i = 0; i < h; ++i) dot += to_f32(dout[t * h + i]) * to_f32(row[i]);
      }
      out[t * a.topk + k] = dot;
    }
  }
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

// Reduces tokens in slices: tokens whose rows are all here first (while the network drains),
// the rest once every stream has arrived.
class TokenReducer : public IdleWork {
 public:
  TokenReducer(const Call& call, const CombineArgs& args, const std::vector<const void*>& pair_rows,
               std::vector<size_t> tokens)
      : call_(call), args_(args), pair_rows_(pair_rows), tokens_(std::move(tokens)) {}

  bool step() override {
    if (next_ >= tokens_.size()) return false;
    const size_t end = std::min(tokens_.size(), next_ + kSlice);
    for (; next_ < end; ++next_) reduce(tokens_[next_]);
    return true;
  }
  void finish() {
    while (step()) {
    }
  }

 private:
  static constexpr size_t kSlice = 16;

  void reduce(size_t t) {
    dispatch_float(call_.dtype, [&](auto tag) {
      using T = decltype(tag);
      if (args_.pair_dot) {
        pair_dot<T>(args_, pair_rows_, t, t + 1);
      } else {
        weighted_sum<T>(args_, pair_rows_, t, t + 1, acc_);
      }
    });
  }

  const Call& call_;
  const CombineArgs& args_;
  const std::vector<const void*>& pair_rows_;
  std::vector<size_t> tokens_;
  size_t next_ = 0;
  std::vector<float> acc_;
};

}  // namespace

MoeSchedule moe_schedule_from_env() {
  const char* env = std::getenv("JACCL_MOE_SCHEDULE");
  if (env == nullptr || *env == 0 || std::string(env) == "remote_first") {
    return MoeSchedule::kRemoteFirst;
  }
  if (std::string(env) == "arrival") return MoeSchedule::kArrival;
  throw_error(ErrorKind::kInvalidArgument, "JACCL_MOE_SCHEDULE must be remote_first or arrival, "
              "not '", env, "'");
}

void moe_exchange(Call& call, const void* src, size_t src_rows, void* dst, size_t dst_rows,
                  size_t row_elems, const RowLists& lists, MoeSchedule schedule) {
  check_list(call, lists.send_rows, lists.send_offsets, lists.send_capacity, src_rows, "send");
  check_list(call, lists.recv_rows, lists.recv_offsets, lists.recv_capacity, dst_rows, "receive");
  const int me = call.member->rank;
  if (listed(lists.send_offsets, me) != listed(lists.recv_offsets, me)) {
    throw_error(ErrorKind::kInvalidArgument, "rows kept on this rank disagree: ",
                listed(lists.send_offsets, me), " sent, ", listed(lists.recv_offsets, me),
                " received");
  }
  const Dtype elem = call.dtype;
  const size_t esize = dtype_size(elem);
  std::memset(dst, 0, dst_rows * row_elems * esize);
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

void moe_combine(Call& call, const CombineArgs& a, const RowLists& lists, MoeSchedule schedule) {
  const size_t pairs = a.tokens * a.topk;
  check_list(call, lists.send_rows, lists.send_offsets, lists.send_capacity, a.y_rows, "send");
  check_list(call, lists.recv_rows, lists.recv_offsets, lists.recv_capacity, pairs, "receive");
  const Communicator::Member& m = *call.member;
  const int me = m.rank;
  if (listed(lists.send_offsets, me) != listed(lists.recv_offsets, me)) {
    throw_error(ErrorKind::kInvalidArgument, "rows kept on this rank disagree");
  }
  const Dtype elem = call.dtype;
  const size_t esize = dtype_size(elem), row_bytes = a.row_elems * esize;
  const auto* y = static_cast<const char*>(a.y);

  // Where each pair's row will be: in y (this rank's experts) or in the staging area.
  std::vector<const void*> pair_rows(pairs, nullptr);
  for (int32_t i = 0; i < lists.recv_offsets[me + 1] - lists.recv_offsets[me]; ++i) {
    pair_rows[lists.recv_rows[lists.recv_offsets[me] + i]] =
        y + static_cast<size_t>(lists.send_rows[lists.send_offsets[me] + i]) * row_bytes;
  }
  size_t remote = 0;
  for (int q = 0; q < m.size; ++q) remote += q == me ? 0 : listed(lists.recv_offsets, q);
  Communicator::Member& member = *call.member;
  if (member.scratch.size() < remote * row_bytes) member.scratch.resize(remote * row_bytes);
  char* staging = member.scratch.data();

  Phase phase;
  std::vector<Task> receives;
  size_t staged = 0;
  for (int q : peer_order(call, schedule)) {
    Task send;
    send.count = listed(lists.send_offsets, q) * a.row_elems;
    send.srcs = {Endpoint::local(Region::row_list(y, esize, a.row_elems,
                                                  lists.send_rows + lists.send_offsets[q],
                                                  listed(lists.send_offsets, q)), elem)};
    send.sinks = {send_to(call, q, stream_tag(2, 0, q), elem)};
    const size_t n = listed(lists.recv_offsets, q);
    Task receive;
    receive.count = n * a.row_elems;
    receive.srcs = {receive_from(call, q, stream_tag(2, 0, me), elem)};
    receive.sinks = {Endpoint::local(Region::contiguous(staging, esize, receive.count,
                                                        staged * a.row_elems), elem)};
    for (size_t i = 0; i < n; ++i) {
      pair_rows[lists.recv_rows[lists.recv_offsets[q] + i]] = staging + (staged + i) * row_bytes;
    }
    staged += n;
    phase.push_back(std::move(send));
    if (schedule == MoeSchedule::kRemoteFirst) {
      receives.push_back(std::move(receive));
    } else {
      phase.push_back(std::move(receive));
    }
  }
  for (Task& t : receives) phase.push_back(std::move(t));

  // Tokens whose rows are all on this rank can be reduced before anything arrives.
  std::vector<bool> waits(a.tokens, false);
  for (int q = 0; q < m.size; ++q) {
    if (q == me) continue;
    for (int32_t i = lists.recv_offsets[q]; i < lists.recv_offsets[q + 1]; ++i) {
      waits[static_cast<size_t>(lists.recv_rows[i]) / a.topk] = true;
    }
  }
  std::vector<size_t> ready, later;
  for (size_t t = 0; t < a.tokens; ++t) (waits[t] ? later : ready).push_back(t);
  TokenReducer early(call, a, pair_rows, schedule == MoeSchedule::kRemoteFirst ? ready
                                                                               : std::vector<size_t>{});
  std::vector<Phase> phases{std::move(phase)};
  run_phases(call, phases, &early);
  early.finish();
  if (schedule == MoeSchedule::kArrival) later.insert(later.begin(), ready.begin(), ready.end());
  TokenReducer(call, a, pair_rows, std::move(later)).finish();
}

}  // namespace jaccl
