// The MoE peer-path schedule (xla_ffi/cuda/peer_moe.cc) on emulated GPUs: dispatch places every
// received row where the receive list says (read from the sender's staging area, padding
// zero), combine sums every token's rows in k order with separate roundings (or takes the
// per-pair dot of the gradient), against references written from the lists' definitions.
// Groups of 2, 3 and 4; float32 rows that allow 16-byte copies and bfloat16/float16 rows
// that do not; several calls in a row on one world (barrier counts carry over).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "common/half.h"
#include "compare.h"
#include "emulated_world.h"
#include "cuda/peer_moe.h"

namespace jaccl::emulated {
namespace {

// The routing every rank can recompute: what sender s sends to receiver r, and where.
struct Routing {
  int n;
  uint64_t seed;
  size_t rows = 6;  // rows each rank sends from (x or y)
  size_t capacity() const { return static_cast<size_t>(n) * 4 + 3; }
  size_t count(int s, int r) const { return mix(seed * 1000 + static_cast<uint64_t>(s * 17 + r)) % 5; }
  int32_t send_row(int s, int r, size_t i) const {
    return static_cast<int32_t>(mix(seed * 7 + static_cast<uint64_t>(s * 1000 + r * 100) + i) % rows);
  }
  std::vector<int32_t> send_offsets(int s) const {
    std::vector<int32_t> o(1, 0);
    for (int r = 0; r < n; ++r) o.push_back(o.back() + static_cast<int32_t>(count(s, r)));
    return o;
  }
  std::vector<int32_t> send_rows(int s) const {
    std::vector<int32_t> rows_list(capacity(), -7);  // entries past the offsets are never read
    size_t j = 0;
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < count(s, r); ++i) rows_list[j++] = send_row(s, r, i);
    }
    return rows_list;
  }
  std::vector<int32_t> recv_offsets(int r) const {
    std::vector<int32_t> o(1, 0);
    for (int s = 0; s < n; ++s) o.push_back(o.back() + static_cast<int32_t>(count(s, r)));
    return o;
  }
  // Distinct targets in [0, slots) for the received rows of rank r (a seeded shuffle).
  std::vector<int32_t> targets(int r, size_t slots) const {
    std::vector<int32_t> t(slots);
    for (size_t i = 0; i < slots; ++i) t[i] = static_cast<int32_t>(i);
    for (size_t i = slots; i > 1; --i) std::swap(t[i - 1], t[mix(seed + static_cast<uint64_t>(r) * 31 + i) % i]);
    t.resize(capacity(), -3);
    return t;
  }
};

struct MoeCase {
  bool combine, pair_dot;
  Dtype dtype;
  size_t hidden;
};

std::vector<char> rows_of(const MoeCase& c, const Routing& routing, int rank) {
  std::vector<char> x(routing.rows * c.hidden * dtype_size(c.dtype));
  fill(c.dtype, x.data(), routing.rows * c.hidden, routing.seed * 16 + static_cast<uint64_t>(rank));
  return x;
}

void run_case(cuda::EmulatedWorld& world, const MoeCase& c, const Routing& routing, int rank) {
  const int n = routing.n;
  const size_t size = dtype_size(c.dtype), row_bytes = c.hidden * size, topk = 2;
  const size_t tokens = static_cast<size_t>(n) * 4, pairs = tokens * topk;
  const std::vector<char> x = rows_of(c, routing, rank);
  const std::vector<int32_t> send_rows = routing.send_rows(rank), send_off = routing.send_offsets(rank);
  const std::vector<int32_t> recv_off = routing.recv_offsets(rank);
  const size_t out_rows = routing.capacity() + 2;
  const std::vector<int32_t> recv = routing.targets(rank, c.combine ? pairs : out_rows);
  std::vector<int32_t> experts(tokens * topk);
  for (size_t i = 0; i < experts.size(); ++i) experts[i] = static_cast<int32_t>(i % 9) - 1;  // -1 .. 7
  std::vector<float> weights(pairs);
  for (size_t p = 0; p < pairs; ++p) weights[p] = static_cast<float>(mix(p + routing.seed) % 1000) / 997.0f;
  std::vector<char> dout(tokens * row_bytes);
  fill(c.dtype, dout.data(), tokens * c.hidden, routing.seed + 99);

  // Received row g: from sender q (the one whose range holds g), its i-th row for me.
  auto received = [&](size_t g, std::vector<char>& scratch) -> const char* {
    int q = 0;
    while (static_cast<size_t>(recv_off[static_cast<size_t>(q) + 1]) <= g) ++q;
    const size_t i = g - static_cast<size_t>(recv_off[static_cast<size_t>(q)]);
    scratch = rows_of(c, routing, q);
    return scratch.data() + static_cast<size_t>(routing.send_row(q, rank, i)) * row_bytes;
  };
  const size_t total = static_cast<size_t>(recv_off.back());
  std::vector<char> want, got, scratch;
  MoeRequest call;
  call.address.kind = c.combine ? CollectiveKind::kMoeCombine : CollectiveKind::kMoeDispatch;
  call.address.dtype = c.dtype;
  call.rows = x.data();
  call.rows_count = routing.rows;
  call.row_elems = c.hidden;
  call.lists[kSendRows] = send_rows.data();
  call.lists[kSendOffsets] = send_off.data();
  call.lists[kRecvRows] = recv.data();
  call.lists[kRecvOffsets] = recv_off.data();
  call.list_counts[kSendRows] = call.list_counts[kRecvRows] = routing.capacity();
  if (!c.combine) {
    want.assign(out_rows * row_bytes, 0);
    for (size_t g = 0; g < total; ++g) {
      std::memcpy(want.data() + static_cast<size_t>(recv[g]) * row_bytes, received(g, scratch), row_bytes);
    }
    got.assign(want.size(), 0x33);
    call.topk_idx = experts.data();
    call.topk_count = experts.size();
    call.num_experts = 8;
    call.out_rows = out_rows;
    call.out_count = out_rows * c.hidden;
  } else {
    std::vector<std::vector<char>> rows_at(pairs);
    for (size_t g = 0; g < total; ++g) {
      const char* row = received(g, scratch);
      rows_at[static_cast<size_t>(recv[g])].assign(row, row + row_bytes);
    }
    call.topk = static_cast<int64_t>(topk);
    call.out_rows = tokens;
    if (c.pair_dot) {
      want.resize(pairs * sizeof(float));
      for (size_t p = 0; p < pairs; ++p) {
        float dot = 0.0f;
        for (size_t i = 0; !rows_at[p].empty() && i < c.hidden; ++i) {
          dot = dot + as_float(c.dtype, dout.data() + ((p / topk) * c.hidden + i) * size) *
                          as_float(c.dtype, rows_at[p].data() + i * size);
        }
        std::memcpy(want.data() + p * sizeof(float), &dot, sizeof dot);
      }
      call.pair_dot = true;
      call.extra = dout.data();
      call.out_count = pairs;
    } else {
      want.resize(tokens * row_bytes);
      for (size_t t = 0; t < tokens; ++t) {
        for (size_t i = 0; i < c.hidden; ++i) {
          float acc = 0.0f;
          bool started = false;
          for (size_t k = 0; k < topk; ++k) {
            const auto& row = rows_at[t * topk + k];
            if (row.empty()) continue;
            const float product = weights[t * topk + k] * as_float(c.dtype, row.data() + i * size);
            acc = started ? acc + product : product;
            started = true;
          }
          store_float(c.dtype, want.data() + (t * c.hidden + i) * size, acc);
        }
      }
      call.extra = weights.data();
      call.out_count = tokens * c.hidden;
    }
    got.assign(want.size(), 0x33);
  }
  call.out = got.data();
  cuda::LocalDevice& me = world.device(rank);
  const std::string what = describe(c.combine ? (c.pair_dot ? "moe pair dot" : "moe combine") : "moe dispatch",
                                    n, c.dtype, c.hidden, "rank " + std::to_string(rank));
  CHECK(cuda::peer_moe_fits(me, call), what + ": does not fit");
  std::vector<int64_t> members;
  for (int g = 0; g < n; ++g) members.push_back(g);
  CHECK(cuda::run_peer_moe(me, members, rank, call, nullptr) == cudaSuccess, what + ": enqueue failed: " + cuda::failure(me));
  const Dtype compared = c.pair_dot ? Dtype::kF32 : c.dtype;
  CHECK(same_values(compared, got.data(), want.data(), want.size() / dtype_size(compared)), what);
}

}  // namespace

void check_moe() {
  const MoeCase cases[] = {
      {false, false, Dtype::kF32, 8},  {false, false, Dtype::kBF16, 5}, {false, false, Dtype::kF16, 16},
      {true, false, Dtype::kF32, 8},   {true, false, Dtype::kBF16, 5},  {true, false, Dtype::kF16, 16},
      {true, true, Dtype::kF32, 8},    {true, true, Dtype::kBF16, 5},   {true, true, Dtype::kF16, 3},
  };
  for (int n : {2, 3, 4}) {
    cuda::EmulatedWorld world(n, 64 * 1024, /*timeout_s=*/60);
    run_ranks(n, [&](int rank) {
      uint64_t seed = 1;
      for (int round = 0; round < 3; ++round) {
        for (const MoeCase& c : cases) run_case(world, c, Routing{n, seed++}, rank);
      }
    });
  }
}

}  // namespace jaccl::emulated
