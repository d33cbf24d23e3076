#include "moe/request.h"

#include "common/error.h"

namespace jaccl {

void check_moe_request(const MoeRequest& c, int n) {
  // An exchange moves rows as bytes (FP8 ones too); combine adds them: floats only.
  if (c.address.kind == CollectiveKind::kMoeCombine && c.address.dtype != Dtype::kF32 &&
      c.address.dtype != Dtype::kBF16 && c.address.dtype != Dtype::kF16) {
    throw_error(ErrorKind::kInvalidArgument, "MoE rows must be float32, bfloat16 or float16, not ",
                dtype_name(c.address.dtype));
  }
  const uint64_t offsets = static_cast<uint64_t>(n) + 1;
  if (c.list_counts[kSendOffsets] != offsets || c.list_counts[kRecvOffsets] != offsets) {
    throw_error(ErrorKind::kInvalidArgument, "MoE offsets need ", offsets,
                " entries (group size + 1)");
  }
  if (c.address.kind == CollectiveKind::kMoeDispatch) {
    if (c.out_rows * c.row_elems != c.out_count) {
      throw_error(ErrorKind::kInvalidArgument, "MoE exchange rows differ in length");
    }
    return;
  }
  const uint64_t topk = static_cast<uint64_t>(c.topk);
  if (c.out_count != c.out_rows * (c.pair_dot ? topk : c.row_elems)) {
    throw_error(ErrorKind::kInvalidArgument, "moe_combine: the output must be [tokens, ",
                c.pair_dot ? "k" : "hidden", "]");
  }
  if (c.pair_dot) {
    if (c.extra_dtype != c.address.dtype || c.extra_count != c.out_rows * c.row_elems) {
      throw_error(ErrorKind::kInvalidArgument,
                  "moe pair_dot: dout must be [tokens, hidden] of y's dtype");
    }
  } else if (c.extra_dtype != Dtype::kF32 || c.extra_count != c.out_rows * topk) {
    throw_error(ErrorKind::kInvalidArgument, "moe_combine: topk_weights must be float32 [tokens, k]");
  }
}

size_t out_bytes(const MoeRequest& c) {
  const bool weights = c.address.kind == CollectiveKind::kMoeCombine && c.pair_dot;
  return c.out_count * dtype_size(weights ? Dtype::kF32 : c.address.dtype);
}

}  // namespace jaccl
