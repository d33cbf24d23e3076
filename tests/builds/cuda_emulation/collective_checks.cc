// The peer-path schedules (xla_ffi/cuda/peer_collectives.cc) on emulated GPUs, checked bit for bit against
// the CPU engine's reduction and the block layouts of the collectives: all_reduce one-shot,
// two-shot and auto (aliased and not), reduce_scatter, all_gather and all_to_all split after
// leading rows or not, groups of 2, 3 and 4 GPUs and two groups at once (the rows and
// columns of a 2 x 2 mesh, taken in turn), with a staging area small enough that every
// collective runs in many chunks, and one large enough for a single chunk.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "common/reduce.h"
#include "compare.h"
#include "emulated_world.h"
#include "cuda/peer_collectives.h"

namespace jaccl::emulated {
namespace {


struct Case {
  CollectiveKind kind;
  Dtype dtype;
  ReduceOp op;
  Algorithm algorithm;
  size_t strip;  // elements of a block per leading row
  size_t outer_in, outer_out;
  bool aliased;
  std::vector<std::vector<int64_t>> groups;
};

// Position of element i of block q in a tensor of `count` elements split n ways after
// `outer` leading rows (the layout every collective uses for its split operand).
size_t block_position(size_t count, size_t outer, int n, int q, size_t i) {
  const size_t strip = count / (outer * static_cast<size_t>(n));
  return i / strip * strip * static_cast<size_t>(n) + static_cast<size_t>(q) * strip + i % strip;
}

struct Shapes {
  size_t in_count, out_count;
};

Shapes shapes_of(const Case& c, int n) {
  const size_t block = c.strip * std::max(c.outer_in, c.outer_out), un = static_cast<size_t>(n);
  switch (c.kind) {
    case CollectiveKind::kAllReduce: return {block, block};
    case CollectiveKind::kReduceScatter: return {block * un, block};
    case CollectiveKind::kAllGather: return {block, block * un};
    default: return {block * un, block * un};
  }
}

std::vector<char> input_of(const Case& c, int case_index, int64_t device, size_t count) {
  std::vector<char> in(count * dtype_size(c.dtype) + 16);
  fill(c.dtype, in.data(), count, static_cast<uint64_t>(case_index) * 64 + static_cast<uint64_t>(device));
  return in;
}

// What member `rank` of `members` must hold after the collective.
std::vector<char> expected(const Case& c, int case_index, const std::vector<int64_t>& members, int rank) {
  const int n = static_cast<int>(members.size());
  const Shapes s = shapes_of(c, n);
  const size_t size = dtype_size(c.dtype);
  std::vector<std::vector<char>> inputs;
  for (int64_t m : members) inputs.push_back(input_of(c, case_index, m, s.in_count));
  std::vector<char> out(s.out_count * size);
  if (c.kind == CollectiveKind::kAllReduce || c.kind == CollectiveKind::kReduceScatter) {
    std::vector<std::vector<char>> blocks(inputs.size());
    std::vector<Operand> operands;
    for (int q = 0; q < n; ++q) {
      auto& b = blocks[static_cast<size_t>(q)];
      b.resize(s.out_count * size);
      for (size_t i = 0; i < s.out_count; ++i) {
        const size_t from = c.kind == CollectiveKind::kAllReduce ? i : block_position(s.in_count, c.outer_in, n, rank, i);
        std::memcpy(b.data() + i * size, inputs[static_cast<size_t>(q)].data() + from * size, size);
      }
      operands.push_back(Operand{b.data(), c.dtype});
    }
    combine(c.op, c.dtype, out.data(), c.dtype, operands.data(), n, s.out_count);
  } else if (c.kind == CollectiveKind::kAllGather) {
    for (int q = 0; q < n; ++q) {
      for (size_t i = 0; i < s.in_count; ++i) {
        std::memcpy(out.data() + block_position(s.out_count, c.outer_out, n, q, i) * size,
                    inputs[static_cast<size_t>(q)].data() + i * size, size);
      }
    }
  } else {  // all_to_all: block p of my output is block `rank` of p's input
    for (int p = 0; p < n; ++p) {
      for (size_t i = 0; i < s.in_count / static_cast<size_t>(n); ++i) {
        std::memcpy(out.data() + block_position(s.out_count, c.outer_out, n, p, i) * size,
                    inputs[static_cast<size_t>(p)].data() + block_position(s.in_count, c.outer_in, n, rank, i) * size,
                    size);
      }
    }
  }
  return out;
}

std::string name_of(const Case& c, int n) {
  std::string s = std::string(kind_name(c.kind)) + " " + algorithm_name(c.algorithm) + " " +
                  reduce_op_name(c.op) + " strip " + std::to_string(c.strip) + " outer " +
                  std::to_string(c.outer_in) + "/" + std::to_string(c.outer_out);
  if (c.aliased) s += " aliased";
  if (c.groups.size() > 1) s += " " + std::to_string(c.groups.size()) + " groups";
  return describe("peer", n, c.dtype, shapes_of(c, n).in_count, s);
}

void run_case(cuda::EmulatedWorld& world, const Case& c, int case_index, int64_t device) {
  int rank = -1;
  const std::vector<int64_t>* members = nullptr;
  for (const auto& g : c.groups) {
    for (size_t r = 0; r < g.size(); ++r) {
      if (g[r] == device) rank = static_cast<int>(r), members = &g;
    }
  }
  if (members == nullptr) return;
  const int n = static_cast<int>(members->size());
  const Shapes s = shapes_of(c, n);
  std::vector<char> in = input_of(c, case_index, device, s.in_count);
  std::vector<char> separate(s.out_count * dtype_size(c.dtype) + 16, 0x5a);
  void* out = c.aliased ? static_cast<void*>(in.data()) : separate.data();
  CollectiveRequest call;
  call.address.kind = c.kind;
  call.address.dtype = c.dtype;
  call.op = c.op;
  call.algorithm = c.algorithm;
  call.in = in.data();
  call.out = out;
  call.in_count = s.in_count;
  call.out_count = s.out_count;
  call.outer_in = c.outer_in;
  call.outer_out = c.outer_out;
  const cudaError_t err = cuda::run_peer_collective(world.device(static_cast<int>(device)),
                                                    *members, rank, call, -1, nullptr);
  const std::string what = name_of(c, n) + " rank " + std::to_string(rank);
  CHECK(err == cudaSuccess, what + ": enqueue failed: " + cuda::failure(world.device(static_cast<int>(device))));
  CHECK(same_values(c.dtype, out, expected(c, case_index, *members, rank).data(), s.out_count), what);
}

std::vector<Case> cases_for(int world_size) {
  std::vector<int64_t> everyone;
  for (int g = 0; g < world_size; ++g) everyone.push_back(g);
  const std::vector<std::vector<int64_t>> one_group = {everyone};
  std::vector<Case> cases;
  const Dtype dtypes[] = {Dtype::kF32, Dtype::kBF16, Dtype::kF16, Dtype::kI32,
                          Dtype::kU8,  Dtype::kF64,  Dtype::kI64, Dtype::kBool};
  for (Dtype dtype : dtypes) {
    const bool boolean = dtype == Dtype::kBool;
    std::vector<ReduceOp> ops = {boolean ? ReduceOp::kMax : ReduceOp::kSum};
    if (dtype == Dtype::kF32 || dtype == Dtype::kI32) ops = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin};
    for (size_t strip : {size_t{1}, size_t{7}, size_t{300}, size_t{2500}}) {
      for (ReduceOp op : ops) {
        for (Algorithm a : {Algorithm::kAuto, Algorithm::kNaive, Algorithm::kMesh}) {
          cases.push_back({CollectiveKind::kAllReduce, dtype, op, a, strip, 1, 1, strip % 2 == 1, one_group});
        }
        for (size_t outer : {size_t{1}, size_t{3}}) {
          cases.push_back({CollectiveKind::kReduceScatter, dtype, op, Algorithm::kAuto, strip, outer, 1, false, one_group});
        }
      }
      for (size_t outer : {size_t{1}, size_t{3}}) {
        cases.push_back({CollectiveKind::kAllGather, dtype, ReduceOp::kSum, Algorithm::kAuto, strip, 1, outer, false, one_group});
        for (size_t outer_out : {size_t{1}, size_t{3}}) {
          cases.push_back({CollectiveKind::kAllToAll, dtype, ReduceOp::kSum, Algorithm::kAuto, strip, outer, outer_out, false, one_group});
        }
      }
    }
  }
  if (world_size == 4) {  // a 2 x 2 mesh: rows, then columns, in turn
    const std::vector<std::vector<int64_t>> rows = {{0, 1}, {2, 3}}, columns = {{0, 2}, {1, 3}};
    for (size_t strip : {size_t{5}, size_t{3000}}) {
      for (int turn = 0; turn < 3; ++turn) {
        cases.push_back({CollectiveKind::kAllReduce, Dtype::kF32, ReduceOp::kSum, Algorithm::kAuto, strip, 1, 1, false, rows});
        cases.push_back({CollectiveKind::kReduceScatter, Dtype::kBF16, ReduceOp::kSum, Algorithm::kAuto, strip, 1, 1, false, columns});
        cases.push_back({CollectiveKind::kAllGather, Dtype::kI32, ReduceOp::kSum, Algorithm::kAuto, strip, 1, 1, false, rows});
        cases.push_back({CollectiveKind::kAllReduce, Dtype::kF16, ReduceOp::kMax, Algorithm::kMesh, strip, 1, 1, false, columns});
      }
    }
  }
  return cases;
}

}  // namespace

void check_collectives() {
  for (int n : {2, 3, 4}) {
    for (size_t staging : {size_t{4096}, size_t{1} << 20}) {
      cuda::EmulatedWorld world(n, staging, /*timeout_s=*/60);
      const std::vector<Case> cases = cases_for(n);
      run_ranks(n, [&](int device) {
        for (size_t i = 0; i < cases.size(); ++i) run_case(world, cases[i], static_cast<int>(i), device);
      });
    }
  }
}

}  // namespace jaccl::emulated
