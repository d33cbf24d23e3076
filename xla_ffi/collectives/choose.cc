// Algorithm choice. An explicit `algorithm=` wins; otherwise JACCL_ALGO
// ("ring", or per op "all_reduce=ring,reduce_scatter=mesh") if it names an
// algorithm the op has; otherwise groups inside one process go direct;
// all_reduce of at most 32 KiB (latency bound) goes naive; groups that span
// hosts with several ranks on each go hierarchical (all_reduce, reduce_scatter);
// the rest go mesh scatter-gather.
#include <cstdlib>
#include <cstring>
#include <string>

#include "collectives/collectives.h"
#include "common/error.h"
#include "common/log.h"

namespace jaccl {
namespace {

constexpr size_t kNaiveMaxBytes = 32 * 1024;

bool supports(CollectiveKind kind, Algorithm algorithm) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return algorithm != Algorithm::kAuto && algorithm != Algorithm::kDirect;
    case CollectiveKind::kReduceScatter:
      return algorithm == Algorithm::kMesh || algorithm == Algorithm::kRing ||
             algorithm == Algorithm::kRingOneWay || algorithm == Algorithm::kHierarchical;
    case CollectiveKind::kAllGather:
      return algorithm == Algorithm::kMesh || algorithm == Algorithm::kRing ||
             algorithm == Algorithm::kRingOneWay;
    default: return algorithm == Algorithm::kMesh;
  }
}

Algorithm parse(const std::string& name) {
  for (Algorithm a : {Algorithm::kNaive, Algorithm::kMesh, Algorithm::kRing, Algorithm::kRingOneWay,
                      Algorithm::kHierarchical}) {
    if (name == algorithm_name(a)) return a;
  }
  throw_error(ErrorKind::kInvalidArgument, "JACCL_ALGO names an unknown algorithm '", name,
              "' (use naive, mesh, ring, ring_oneway or hierarchical)");
}

// The JACCL_ALGO override for `kind`, or kAuto.
Algorithm from_env(CollectiveKind kind) {
  const char* env = std::getenv("JACCL_ALGO");
  if (env == nullptr || *env == 0) return Algorithm::kAuto;
  std::string spec(env);
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    std::string item = spec.substr(pos, end - pos);
    size_t eq = item.find('=');
    if (eq == std::string::npos) {
      Algorithm a = parse(item);
      if (supports(kind, a)) return a;
    } else if (item.substr(0, eq) == kind_name(kind)) {
      Algorithm a = parse(item.substr(eq + 1));
      if (!supports(kind, a)) {
        throw_error(ErrorKind::kInvalidArgument, "JACCL_ALGO: ", kind_name(kind),
                    " has no algorithm '", algorithm_name(a), "'");
      }
      return a;
    }
    pos = end + 1;
  }
  return Algorithm::kAuto;
}

}  // namespace

Algorithm choose_algorithm(CollectiveKind kind, Algorithm requested, size_t bytes,
                           const GroupShape& group) {
  Algorithm chosen = requested;
  if (chosen != Algorithm::kAuto && !supports(kind, chosen)) {
    throw_error(ErrorKind::kInvalidArgument, kind_name(kind), " has no algorithm '",
                algorithm_name(chosen), "'");
  }
  if (chosen == Algorithm::kAuto) chosen = from_env(kind);
  if (chosen == Algorithm::kAuto && group.in_process) chosen = Algorithm::kDirect;
  if (chosen == Algorithm::kAuto) {
    const bool small = bytes <= kNaiveMaxBytes || group.size <= 1;
    if (kind == CollectiveKind::kAllReduce && small) {
      chosen = Algorithm::kNaive;
    } else if (group.hierarchical && (kind == CollectiveKind::kAllReduce ||
                                      kind == CollectiveKind::kReduceScatter)) {
      chosen = Algorithm::kHierarchical;
    } else {
      chosen = Algorithm::kMesh;
    }
  }
  return chosen;
}

}  // namespace jaccl
