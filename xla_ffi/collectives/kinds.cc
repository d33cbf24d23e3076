#include "collectives/kinds.h"

#include "common/reduce.h"

namespace jaccl {

bool reduces(CollectiveKind kind) {
  return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter;
}

std::string op_shown(CollectiveKind kind, uint8_t op) {
  return reduces(kind) ? std::string(reduce_op_name(static_cast<ReduceOp>(op))) + ", " : "";
}

const char* kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kAllToAll: return "all_to_all";
    case CollectiveKind::kMoeDispatch: return "moe_dispatch";
    case CollectiveKind::kMoeCombine: return "moe_combine";
    case CollectiveKind::kPermute: return "ppermute";
    case CollectiveKind::kRaggedAllToAll: return "ragged_all_to_all";
    case CollectiveKind::kPointToPoint: return "point_to_point";
  }
  return "unknown";
}

std::vector<CollectiveKind> all_kinds() {
  return {CollectiveKind::kAllReduce,  CollectiveKind::kReduceScatter,
          CollectiveKind::kAllGather,  CollectiveKind::kAllToAll,
          CollectiveKind::kMoeDispatch, CollectiveKind::kMoeCombine,
          CollectiveKind::kPermute,    CollectiveKind::kRaggedAllToAll,
          CollectiveKind::kPointToPoint};
}

std::vector<Algorithm> all_algorithms() {
  return {Algorithm::kAuto,       Algorithm::kNaive,  Algorithm::kMesh,
          Algorithm::kRing,       Algorithm::kRingOneWay, Algorithm::kDirect,
          Algorithm::kHierarchical, Algorithm::kCascade};
}

// Which schedules each op has written (kDirect is chosen only for in-process groups).
bool supports(CollectiveKind kind, Algorithm algorithm) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return algorithm != Algorithm::kAuto && algorithm != Algorithm::kDirect;
    case CollectiveKind::kReduceScatter:
      return algorithm == Algorithm::kMesh || algorithm == Algorithm::kRing ||
             algorithm == Algorithm::kRingOneWay || algorithm == Algorithm::kHierarchical;
    case CollectiveKind::kAllGather:
      return algorithm == Algorithm::kMesh || algorithm == Algorithm::kRing ||
             algorithm == Algorithm::kRingOneWay;
    default: return algorithm == Algorithm::kMesh;
  }
}

const char* algorithm_name(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kNaive: return "naive";
    case Algorithm::kMesh: return "mesh";
    case Algorithm::kRing: return "ring";
    case Algorithm::kRingOneWay: return "ring_oneway";
    case Algorithm::kDirect: return "direct";
    case Algorithm::kHierarchical: return "hierarchical";
    case Algorithm::kCascade: return "cascade";
  }
  return "unknown";
}

}  // namespace jaccl
