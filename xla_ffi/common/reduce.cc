#include "common/reduce.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "common/error.h"
#include "common/half.h"
#include "common/reduce_apply.h"
#include "common/vector_clones.h"

namespace jaccl {
namespace {

// Storage type -> accumulator type.
template <typename T> struct Acc { using type = T; };
template <> struct Acc<bf16_t> { using type = float; };
template <> struct Acc<f16_t> { using type = float; };

template <typename A, typename T>
inline A widen(T x) {
  if constexpr (std::is_same_v<T, bf16_t> || std::is_same_v<T, f16_t>) return to_float(x);
  else return static_cast<A>(x);
}

// A fold's result as T. A bfloat16 NaN comes out as XLA:CPU's folds give it, the quiet NaN of
// its sign without payload (to_bf16 keeps the payload's top bits). The bfloat16 case is
// to_bf16's rounding written as one integer select, so that the loops around it vectorise (a
// branch on the NaN left them scalar).
template <typename T, typename A>
inline T narrow(A x) {
  if constexpr (std::is_same_v<T, bf16_t>) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t nan = ((u >> 16) & 0x8000u) | 0x7fc0u;
    return bf16_t{static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded)};
  } else if constexpr (std::is_same_v<T, f16_t>) {
    return to_f16(x);
  } else {
    return static_cast<T>(x);
  }
}

// One step of a fold over values stored as T: apply<kOp>, then float16's rounding after every
// step; of two NaNs a float16 sum keeps the earlier (common/reduce_apply.h).
template <ReduceOp kOp, typename T, typename A>
inline A step(A acc, A x) {
  if constexpr (std::is_same_v<T, f16_t>) {
    const A next = widen<A>(narrow<T>(apply<kOp>(acc, x)));
    return float16_keeps_earlier<kOp>(acc, x) ? acc : next;  // a select: the loop vectorises
  } else {
    return apply<kOp>(acc, x);
  }
}

constexpr size_t kBlock = 512;

// Loads n elements stored as T or as A into the accumulator block, seeded (reduce_apply.h).
template <ReduceOp kOp, typename T, typename A>
inline void load_block(A* acc, const Operand& src, Dtype acc_dtype, size_t offset, size_t n) {
  if (src.dtype == acc_dtype) {
    std::memcpy(acc, static_cast<const A*>(src.data) + offset, n * sizeof(A));
    if constexpr (kSeeds<kOp, A>) {
      if (!src.running) for (size_t i = 0; i < n; ++i) acc[i] = seed<kOp>(acc[i]);
    }
  } else {
    const T* s = static_cast<const T*>(src.data) + offset;
    if (src.running) {
      for (size_t i = 0; i < n; ++i) acc[i] = widen<A>(s[i]);
    } else {
      for (size_t i = 0; i < n; ++i) acc[i] = seed<kOp>(widen<A>(s[i]));
    }
  }
}

template <ReduceOp kOp, typename T, typename A>
inline void fold_block(A* acc, const Operand& src, Dtype acc_dtype, size_t offset, size_t n) {
  if (src.dtype == acc_dtype) {
    const A* s = static_cast<const A*>(src.data) + offset;
    for (size_t i = 0; i < n; ++i) acc[i] = step<kOp, T>(acc[i], s[i]);
  } else {
    const T* s = static_cast<const T*>(src.data) + offset;
    for (size_t i = 0; i < n; ++i) acc[i] = step<kOp, T>(acc[i], widen<A>(s[i]));
  }
}

template <typename T, typename A>
inline void store_block(void* dst, Dtype dst_dtype, Dtype acc_dtype, const A* acc, size_t offset,
                        size_t n) {
  if (dst_dtype == acc_dtype) {
    std::memcpy(static_cast<A*>(dst) + offset, acc, n * sizeof(A));
  } else {
    T* d = static_cast<T*>(dst) + offset;
    for (size_t i = 0; i < n; ++i) d[i] = narrow<T>(acc[i]);
  }
}

template <ReduceOp kOp, typename T>
void combine_typed(Dtype elem, void* dst, Dtype dst_dtype, const Operand* srcs, int num_srcs,
                   size_t n) {
  using A = typename Acc<T>::type;
  const Dtype acc_dtype = accumulator_dtype(elem);
  if constexpr (std::is_same_v<T, A>) {
    // Storage and accumulator agree: the common two-operand case needs no staging.
    if (num_srcs == 2) {
      const T* a = static_cast<const T*>(srcs[0].data);
      const T* b = static_cast<const T*>(srcs[1].data);
      T* d = static_cast<T*>(dst);
      if (srcs[0].running) {
        for (size_t i = 0; i < n; ++i) d[i] = apply<kOp>(a[i], b[i]);
      } else {
        for (size_t i = 0; i < n; ++i) d[i] = apply<kOp>(seed<kOp>(a[i]), b[i]);
      }
      return;
    }
  }
  A acc[kBlock];
  for (size_t offset = 0; offset < n; offset += kBlock) {
    size_t m = n - offset < kBlock ? n - offset : kBlock;
    load_block<kOp, T, A>(acc, srcs[0], acc_dtype, offset, m);
    for (int k = 1; k < num_srcs; ++k) fold_block<kOp, T, A>(acc, srcs[k], acc_dtype, offset, m);
    store_block<T, A>(dst, dst_dtype, acc_dtype, acc, offset, m);
  }
}

template <typename T>
void combine_op(ReduceOp op, Dtype elem, void* dst, Dtype dst_dtype, const Operand* srcs,
                int num_srcs, size_t n) {
  switch (op) {
    case ReduceOp::kSum: return combine_typed<ReduceOp::kSum, T>(elem, dst, dst_dtype, srcs, num_srcs, n);
    case ReduceOp::kProd: return combine_typed<ReduceOp::kProd, T>(elem, dst, dst_dtype, srcs, num_srcs, n);
    case ReduceOp::kMax: return combine_typed<ReduceOp::kMax, T>(elem, dst, dst_dtype, srcs, num_srcs, n);
    case ReduceOp::kMin: return combine_typed<ReduceOp::kMin, T>(elem, dst, dst_dtype, srcs, num_srcs, n);
    default: throw_error(ErrorKind::kInvalidArgument, "unknown reduce op ", static_cast<int>(op));
  }
}

template <typename T>
void convert_typed(Dtype elem, void* dst, Dtype dst_dtype, const void* src, Dtype src_dtype,
                   size_t n) {
  using A = typename Acc<T>::type;
  const Dtype acc_dtype = accumulator_dtype(elem);
  if (dst_dtype == src_dtype) {
    std::memcpy(dst, src, n * dtype_size(dst_dtype));
  } else if (src_dtype == acc_dtype) {
    const A* s = static_cast<const A*>(src);
    T* d = static_cast<T*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = narrow<T>(s[i]);
  } else {
    const T* s = static_cast<const T*>(src);
    A* d = static_cast<A*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = widen<A>(s[i]);
  }
}

// Calls fn.template operator()<T>() with T the storage type of `elem`.
template <typename Fn>
void dispatch(Dtype elem, Fn&& fn) {
  switch (elem) {
    case Dtype::kBool: return fn(uint8_t{});
    case Dtype::kI8: return fn(int8_t{});
    case Dtype::kI16: return fn(int16_t{});
    case Dtype::kI32: return fn(int32_t{});
    case Dtype::kI64: return fn(int64_t{});
    case Dtype::kU8: return fn(uint8_t{});
    case Dtype::kU16: return fn(uint16_t{});
    case Dtype::kU32: return fn(uint32_t{});
    case Dtype::kU64: return fn(uint64_t{});
    case Dtype::kF16: return fn(f16_t{});
    case Dtype::kBF16: return fn(bf16_t{});
    case Dtype::kF32: return fn(float{});
    case Dtype::kF64: return fn(double{});
    default: throw_error(ErrorKind::kInvalidArgument, "unsupported dtype ", static_cast<int>(elem));
  }
}

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  static const char* const kNames[] = {"sum", "prod", "max", "min"};
  auto i = static_cast<size_t>(op);
  return i < static_cast<size_t>(ReduceOp::kCount) ? kNames[i] : "unknown";
}

namespace {

// float16 and bfloat16, whose loops widen and narrow every element, compiled for AVX-512 and
// AVX2 too (2.3x on bfloat16 sums here); the other types' loops wait on memory either way, and
// cloning them all would multiply the build's time by eight.
JACCL_VECTOR_CLONES void combine_half(ReduceOp op, Dtype elem, void* dst, Dtype dst_dtype,
                                      const Operand* srcs, int num_srcs, size_t n) {
  if (elem == Dtype::kBF16) return combine_op<bf16_t>(op, elem, dst, dst_dtype, srcs, num_srcs, n);
  combine_op<f16_t>(op, elem, dst, dst_dtype, srcs, num_srcs, n);
}

JACCL_VECTOR_CLONES void convert_half(Dtype elem, void* dst, Dtype dst_dtype, const void* src,
                                      Dtype src_dtype, size_t n) {
  if (elem == Dtype::kBF16) return convert_typed<bf16_t>(elem, dst, dst_dtype, src, src_dtype, n);
  convert_typed<f16_t>(elem, dst, dst_dtype, src, src_dtype, n);
}

bool half(Dtype elem) { return elem == Dtype::kBF16 || elem == Dtype::kF16; }

// Whether a fold of one operand is more than a conversion: seed() changes floats' (reduce_apply.h).
bool seeds(ReduceOp op, Dtype elem) { return is_float(elem) && op != ReduceOp::kProd; }

}  // namespace

void combine(ReduceOp op, Dtype elem, void* dst, Dtype dst_dtype, const Operand* srcs,
             int num_srcs, size_t n) {
  if (n == 0) return;
  if (num_srcs == 1 && (!seeds(op, elem) || srcs[0].running)) {
    return convert(elem, dst, dst_dtype, srcs[0].data, srcs[0].dtype, n);
  }
  if (half(elem)) return combine_half(op, elem, dst, dst_dtype, srcs, num_srcs, n);
  dispatch(elem, [&](auto tag) {
    using T = decltype(tag);
    combine_op<T>(op, elem, dst, dst_dtype, srcs, num_srcs, n);
  });
}

void convert(Dtype elem, void* dst, Dtype dst_dtype, const void* src, Dtype src_dtype, size_t n) {
  if (n == 0) return;
  if (dst_dtype == src_dtype) {
    if (dst != src) std::memcpy(dst, src, n * dtype_size(dst_dtype));
    return;
  }
  if (half(elem)) return convert_half(elem, dst, dst_dtype, src, src_dtype, n);
  dispatch(elem, [&](auto tag) {
    using T = decltype(tag);
    convert_typed<T>(elem, dst, dst_dtype, src, src_dtype, n);
  });
}

}  // namespace jaccl
