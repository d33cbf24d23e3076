#include "collectives/request.h"

#include <cstring>
#include <vector>

#include "common/error.h"

namespace jaccl {
namespace {

const char* const kIndexNames[4] = {"input_offsets", "send_sizes", "output_offsets",
                                    "recv_sizes"};

// a is a whole number of b (no b: a is none).
bool divides(size_t b, size_t a) { return b == 0 ? a == 0 : a % b == 0; }

// The element counts a kind needs over a group of n: the algorithms divide by them unchecked.
bool counts_split(const CollectiveRequest& r, size_t n) {
  const size_t in = r.in_count, out = r.out_count;
  switch (r.address.kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kPermute: return in == out;
    case CollectiveKind::kReduceScatter: return in == out * n && divides(r.outer_in * n, in);
    case CollectiveKind::kAllGather: return out == in * n && divides(r.outer_out * n, out);
    case CollectiveKind::kAllToAll:
      return in == out && divides(r.outer_in * n, in) && divides(r.outer_out * n, out);
    default: return false;
  }
}

void check_ragged(const CollectiveRequest& r, int n) {
  const size_t entries = r.ragged[kInputOffsets].count;
  for (int i = 0; i < 4; ++i) {
    const IndexArray& a = r.ragged[i];
    if (a.bytes != 4 && a.bytes != 8) {
      throw_error(ErrorKind::kInvalidArgument, "ragged_all_to_all: ", kIndexNames[i],
                  " must be int32 or int64");
    }
    if (a.count != entries || entries == 0 || entries % n != 0) {
      throw_error(ErrorKind::kInvalidArgument, "ragged_all_to_all: ", kIndexNames[i], " has ",
                  a.count, " entries, input_offsets ", entries,
                  ": they need the same number, a multiple of the group size ", n);
    }
  }
  if (r.in_count != r.in_rows * r.row_elems || r.out_count != r.out_rows * r.row_elems) {
    throw_error(ErrorKind::kInvalidArgument, "ragged_all_to_all: the operand's and the "
                "output's rows differ in length");
  }
}

// ppermute: every pair inside the group, no rank sending or receiving twice (jax.lax's rule).
Permutation check_pairs(const CollectiveRequest& r, int n, int rank) {
  if (r.pairs_len % 2 != 0) throw_error(ErrorKind::kInvalidArgument, "ppermute: odd pair list");
  std::vector<char> sends(n, 0), receives(n, 0);
  Permutation p;
  for (size_t i = 0; i < r.pairs_len; i += 2) {
    const int64_t source = r.pairs[i], dest = r.pairs[i + 1];
    if (source < 0 || source >= n || dest < 0 || dest >= n) {
      throw_error(ErrorKind::kInvalidArgument, "ppermute: pair (", source, ", ", dest,
                  ") is outside a group of ", n);
    }
    if (sends[source]++ || receives[dest]++) {
      throw_error(ErrorKind::kInvalidArgument, "ppermute: rank ", sends[source] > 1 ? source : dest,
                  sends[source] > 1 ? " sends" : " receives", " twice in the pairs");
    }
    if (source == rank) p.send_to = static_cast<int>(dest);
    if (dest == rank) p.receive_from = static_cast<int>(source);
  }
  return p;
}

}  // namespace

Permutation check_request(const CollectiveRequest& r, int n, int rank) {
  if (r.address.kind == CollectiveKind::kRaggedAllToAll) {
    check_ragged(r, n);
    return Permutation{};
  }
  if (!counts_split(r, static_cast<size_t>(n))) {
    throw_error(ErrorKind::kInvalidArgument, kind_name(r.address.kind), " of ", r.in_count,
                " -> ", r.out_count, " elements does not split over a group of ", n);
  }
  if (r.address.kind == CollectiveKind::kPermute) return check_pairs(r, n, rank);
  return Permutation{};
}

void widen(const IndexArray& a, int64_t* out) {
  if (a.bytes == 8) {
    std::memcpy(out, a.data, a.count * sizeof(int64_t));
    return;
  }
  const int32_t* p = static_cast<const int32_t*>(a.data);
  for (size_t i = 0; i < a.count; ++i) out[i] = p[i];
}

}  // namespace jaccl
