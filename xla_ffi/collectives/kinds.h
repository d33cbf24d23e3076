// Names shared by Python, the handlers and the frame headers.
//
// Contract: the numeric values travel in frame headers and FFI attributes; keep
// them stable. Python takes them from the extension (codes(), jax_jaccl/_codes.py),
// never from a copy. supports() says which algorithms an op has.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace jaccl {

enum class CollectiveKind : uint8_t {
  kAllReduce = 1,
  kReduceScatter = 2,
  kAllGather = 3,
  kAllToAll = 4,
  kMoeDispatch = 5,
  kMoeCombine = 6,
  kPermute = 7,         // collective permute (jax.lax.ppermute)
  kRaggedAllToAll = 8,  // jax.lax.ragged_all_to_all
  kPointToPoint = 9,    // sends and receives between pairs of ranks (XLA's MPI calls)
};

enum class Algorithm : uint8_t {
  kAuto = 0,
  kNaive = 1,       // everyone sends everything; latency bound messages
  kMesh = 2,        // direct exchange with every peer at once (scatter-gather)
  kRing = 3,        // bidirectional ring
  kRingOneWay = 4,  // one-way ring
  kDirect = 5,      // in-process group: members read each other's buffers
  kHierarchical = 6,  // within hosts, then across hosts, then within hosts again
  kCascade = 7,         // through the processes in rank order, then back (all_reduce)
};

const char* kind_name(CollectiveKind kind);
// Whether the kind folds its operands with its reduce op (all-reduce, reduce-scatter); the
// others move elements unchanged, bit for bit (-0, NaN payloads and all).
bool reduces(CollectiveKind kind);
// How a call's description shows its reduce op: "sum, " for the kinds that reduce (all-reduce,
// reduce-scatter), "" for the others, whose op field is unused.
std::string op_shown(CollectiveKind kind, uint8_t op);
const char* algorithm_name(Algorithm algorithm);
bool supports(CollectiveKind kind, Algorithm algorithm);  // kAuto: never
std::vector<CollectiveKind> all_kinds();
std::vector<Algorithm> all_algorithms();

}  // namespace jaccl
