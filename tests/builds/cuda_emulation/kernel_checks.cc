// The kernels on their own, against the CPU engine's arithmetic: the reduction (every dtype
// and op, 1 to 16 operands, counts around the vector width, aligned and unaligned pointers),
// the MoE weighted combine and pair dot (float32 / bfloat16 / float16, hidden sizes that do
// and do not allow 16-byte vectors, missing rows), row gather and strided copy.
#include <cmath>
#include <cstring>
#include <vector>

#include "check.h"
#include "common/half.h"
#include "common/reduce.h"
#include "compare.h"
#include "cuda/kernels/kernels.h"
#include "cuda/kernels/moe_peer_kernels.h"

namespace jaccl::emulated {
namespace {

using cuda::launch_reduce;

const Dtype kAllDtypes[] = {Dtype::kBool, Dtype::kI8,  Dtype::kI16, Dtype::kI32, Dtype::kI64,
                            Dtype::kU8,   Dtype::kU16, Dtype::kU32, Dtype::kU64, Dtype::kF16,
                            Dtype::kBF16, Dtype::kF32, Dtype::kF64};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin};

// How the pointers of a reduction sit against 16-byte boundaries.
enum class Placement { kAligned, kAllShifted, kFirstShifted, kDstShifted };

const char* placement_name(Placement p) {
  switch (p) {
    case Placement::kAligned: return "aligned";
    case Placement::kAllShifted: return "all pointers one element past a boundary";
    case Placement::kFirstShifted: return "operand 0 one element past a boundary";
    default: return "output one element past a boundary";
  }
}

void check_one_reduce(Dtype dtype, ReduceOp op, int n, size_t count, Placement placement) {
  const size_t size = dtype_size(dtype);
  auto shift_of = [&](int k) -> size_t {  // k = -1: the output
    if (placement == Placement::kAllShifted) return 1;
    if (placement == Placement::kFirstShifted) return k == 0 ? 1 : 0;
    if (placement == Placement::kDstShifted) return k == -1 ? 1 : 0;
    return 0;
  };
  // Buffers of uint4 keep the data 16-byte aligned before the shift.
  auto buffer = [&] { return std::vector<uint4>((count + 1) * size / 16 + 2); };
  std::vector<std::vector<uint4>> inputs(static_cast<size_t>(n));
  std::vector<const void*> srcs;
  std::vector<Operand> operands;
  for (int k = 0; k < n; ++k) {
    auto& in = inputs[static_cast<size_t>(k)];
    in = buffer();
    char* data = reinterpret_cast<char*>(in.data()) + shift_of(k) * size;
    fill(dtype, data, count, 1000 * k + count);
    srcs.push_back(data);
    operands.push_back(Operand{data, dtype});
  }
  std::vector<uint4> out = buffer();
  char* got = reinterpret_cast<char*>(out.data()) + shift_of(-1) * size;
  std::vector<char> want(count * size);
  const cudaError_t err = launch_reduce(op, dtype, got, srcs.data(), n, count, nullptr);
  combine(op, dtype, want.data(), dtype, operands.data(), n, count);
  const std::string what = describe("reduce", n, dtype, count,
                                    std::string(reduce_op_name(op)) + ", " + placement_name(placement));
  CHECK(err == cudaSuccess, what + ": launch failed");
  CHECK(same_values(dtype, got, want.data(), count), what);
}

// Every operand count (1-8 have kernels of their own, 9-16 share one), counts around the
// vector width and past several grid steps of the emulated GPU (a wave of 4 blocks), every
// placement: aligned, a common offset (head and tail elements), offsets that differ.
void check_reduce() {
  const Placement placements[] = {Placement::kAligned, Placement::kAllShifted, Placement::kFirstShifted,
                                  Placement::kDstShifted};
  for (Dtype dtype : kAllDtypes) {
    for (ReduceOp op : kOps) {
      if (dtype == Dtype::kBool && (op == ReduceOp::kSum || op == ReduceOp::kProd)) continue;
      for (int n = 1; n <= cuda::kMaxOperands; ++n) {
        for (size_t count : {size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{33}, size_t{1031}}) {
          for (Placement placement : placements) check_one_reduce(dtype, op, n, count, placement);
        }
      }
      for (int n : {1, 2, 3, 4, 8, 9}) {
        for (size_t count : {size_t{40000}, size_t{100003}}) {
          check_one_reduce(dtype, op, n, count, Placement::kAligned);
          check_one_reduce(dtype, op, n, count, Placement::kAllShifted);
        }
      }
    }
  }
}

// The MoE combine (and pair dot) of moe.cc's arithmetic: first product, then += product,
// each product and sum rounded to float32; a token with no row at all is zero.
void check_combine() {
  for (Dtype dtype : {Dtype::kF32, Dtype::kBF16, Dtype::kF16}) {
    const size_t size = dtype_size(dtype);
    for (size_t hidden : {size_t{1}, size_t{5}, size_t{8}, size_t{24}, size_t{200}, size_t{1032}}) {
      // topk 9: two batches of rows in flight; 70: pairs past the ones kept in shared memory.
      for (size_t topk : {size_t{3}, size_t{9}, size_t{70}}) {
        if (topk == 70 && hidden > 24) continue;
        const size_t tokens = 9, row_bytes = hidden * size;
        std::vector<char> rows_data(tokens * topk * row_bytes);
        fill(dtype, rows_data.data(), tokens * topk * hidden, hidden);
        std::vector<const void*> rows(tokens * topk);
        std::vector<float> weights(tokens * topk);
        for (size_t p = 0; p < tokens * topk; ++p) {
          const uint64_t r = mix(p + 77 * hidden);
          // Pair p uses row (p * 5) % pairs; about one pair in 5 (and all of token 4) has none.
          rows[p] = (r % 5 == 0 || p / topk == 4) ? nullptr : rows_data.data() + (p * 5 % (tokens * topk)) * row_bytes;
          weights[p] = static_cast<float>(r % 1000) / 997.0f;
        }
        std::vector<char> dout(tokens * row_bytes);
        fill(dtype, dout.data(), tokens * hidden, 5 + hidden);
        std::vector<char> got(tokens * row_bytes), want(tokens * row_bytes);
        std::vector<float> got_dot(tokens * topk), want_dot(tokens * topk);
        for (size_t t = 0; t < tokens; ++t) {
          for (size_t i = 0; i < hidden; ++i) {
            float acc = 0.0f;
            bool started = false;
            for (size_t k = 0; k < topk; ++k) {
              const char* row = static_cast<const char*>(rows[t * topk + k]);
              if (row == nullptr) continue;
              const float product = weights[t * topk + k] * as_float(dtype, row + i * size);
              acc = started ? acc + product : product;
              started = true;
            }
            store_float(dtype, want.data() + (t * hidden + i) * size, acc);
          }
          for (size_t k = 0; k < topk; ++k) {
            const char* row = static_cast<const char*>(rows[t * topk + k]);
            float dot = 0.0f;
            for (size_t i = 0; row != nullptr && i < hidden; ++i) {
              dot = dot + as_float(dtype, dout.data() + (t * hidden + i) * size) * as_float(dtype, row + i * size);
            }
            want_dot[t * topk + k] = dot;
          }
        }
        const std::string what = describe("moe combine", 1, dtype, tokens * hidden,
                                          "hidden " + std::to_string(hidden) + " topk " + std::to_string(topk));
        CHECK(cuda::launch_moe_combine(dtype, got.data(), rows.data(), weights.data(), tokens, topk,
                                       hidden, nullptr) == cudaSuccess, what + ": launch failed");
        CHECK(same_values(dtype, got.data(), want.data(), tokens * hidden), what);
        CHECK(cuda::launch_pair_dot(dtype, got_dot.data(), rows.data(), dout.data(), tokens, topk,
                                    hidden, nullptr) == cudaSuccess, what + ": pair dot launch failed");
        CHECK(same_values(Dtype::kF32, got_dot.data(), want_dot.data(), tokens * topk), what + " pair dot");
      }
    }
  }
}

void check_moves() {
  // 9616 bytes: 601 vectors, an unrolled step of a 128-thread block (4 vectors per thread)
  // and a partial one of 1 vector for some threads; 14416 bytes: 901 vectors, a partial step
  // of 3 vectors for every thread and a 4th for some.
  for (size_t row_bytes : {size_t{4}, size_t{48}, size_t{100}, size_t{9616}, size_t{14416}}) {
    const size_t n_src = 11, n = 6;
    std::vector<char> src(n_src * row_bytes + 16), got(n * row_bytes + 16, 0), want(n * row_bytes, 0);
    fill(Dtype::kU8, src.data(), src.size(), row_bytes);
    const std::vector<int32_t> rows = {3, 0, 10, 3, 7, 1};
    for (size_t i = 0; i < n; ++i) std::memcpy(want.data() + i * row_bytes, src.data() + rows[i] * row_bytes, row_bytes);
    CHECK(cuda::launch_gather_rows(got.data(), src.data(), rows.data(), n, row_bytes, nullptr) == cudaSuccess,
          "gather rows: launch failed");
    CHECK(std::memcmp(got.data(), want.data(), n * row_bytes) == 0,
          "gather rows of " + std::to_string(row_bytes) + " bytes");
  }
  // Strided copy: a [4, 3 x 5] array's block 1 (columns 5..9 of every row), from element 2 on,
  // into a contiguous array, and back into block 2 of another.
  for (size_t esize : {size_t{1}, size_t{2}, size_t{4}, size_t{8}}) {
    const size_t strip = 5, groups = 3, rows = 4, count = rows * strip - 2;
    std::vector<char> a(rows * groups * strip * esize), b(count * esize), c(a.size(), 0), want_c(a.size(), 0);
    fill(Dtype::kU8, a.data(), a.size(), esize);
    auto at = [&](size_t q, size_t i) { return (i / strip * strip * groups + q * strip + i % strip) * esize; };
    cuda::StridedView block1{a.data() + 1 * strip * esize, strip, strip * groups, 2};
    CHECK(cuda::launch_strided_copy(cuda::StridedView{b.data(), 0, 0, 0}, block1, count, esize, nullptr) == cudaSuccess,
          "strided copy: launch failed");
    bool same = true;
    for (size_t i = 0; i < count; ++i) same &= std::memcmp(b.data() + i * esize, a.data() + at(1, i + 2), esize) == 0;
    CHECK(same, "strided copy out of a block, element size " + std::to_string(esize));
    cuda::StridedView block2{c.data() + 2 * strip * esize, strip, strip * groups, 2};
    CHECK(cuda::launch_strided_copy(block2, cuda::StridedView{b.data(), 0, 0, 0}, count, esize, nullptr) == cudaSuccess,
          "strided copy: launch failed");
    for (size_t i = 0; i < count; ++i) std::memcpy(want_c.data() + at(2, i + 2), b.data() + i * esize, esize);
    CHECK(c == want_c, "strided copy into a block, element size " + std::to_string(esize));
  }
}

}  // namespace

void check_kernels() {
  check_reduce();
  check_combine();
  check_moves();
}

}  // namespace jaccl::emulated
