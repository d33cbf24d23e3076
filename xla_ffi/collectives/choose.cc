// Algorithm choice. An explicit `algorithm=` wins; otherwise the override the
// host set from JACCL_ALGO ("ring", or per op "all_reduce=ring,reduce_scatter=mesh")
// if it names an algorithm the op has (hierarchical and cascade: where the group has
// their layout); otherwise groups inside one process go direct;
// all_reduce of at most 32 KiB (latency bound) goes naive; groups that span
// hosts with several ranks on each go hierarchical (all_reduce, reduce_scatter) where
// the fold's order does not change its bits (integer types: hierarchical adds each host's
// partial sum, not every rank's value in rank order, and float sums round differently);
// all_reduce over processes of one host each holding the same number (> 1) of
// consecutive ranks goes cascade (half the copies between processes; between hosts it
// would send as much as mesh over two processes, more over three or more); the rest go
// mesh scatter-gather. Both fold every element in rank order, so a float result has
// the same bits whatever the process layout.
#include <array>
#include <atomic>
#include <string>

#include "collectives/collectives.h"
#include "common/error.h"
#include "common/log.h"

namespace jaccl {
namespace {

constexpr size_t kNaiveMaxBytes = 32 * 1024;

// The override of each CollectiveKind (indexed by its value), kAuto where none.
std::array<std::atomic<Algorithm>, 16> overrides{};

Algorithm parse(const std::string& name) {
  for (Algorithm a : {Algorithm::kNaive, Algorithm::kMesh, Algorithm::kRing, Algorithm::kRingOneWay,
                      Algorithm::kHierarchical, Algorithm::kCascade}) {
    if (name == algorithm_name(a)) return a;
  }
  throw_error(ErrorKind::kInvalidArgument, "JACCL_ALGO names an unknown algorithm '", name,
              "' (use naive, mesh, ring, ring_oneway, hierarchical or cascade)");
}

}  // namespace

// Each kind takes the first item of the spec that applies to it: "kind=algorithm" for
// its own name, or a bare algorithm it has. Every item is checked, for every kind, before
// any override changes, so a bad spec leaves the previous one in force.
void set_algorithm_overrides(const std::string& spec) {
  std::array<Algorithm, 16> chosen{};
  chosen.fill(Algorithm::kAuto);
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const Algorithm a = parse(eq == std::string::npos ? item : item.substr(eq + 1));
    bool named = eq == std::string::npos;
    for (CollectiveKind kind : all_kinds()) {
      const size_t k = static_cast<size_t>(kind);
      if (eq == std::string::npos) {
        if (supports(kind, a) && chosen[k] == Algorithm::kAuto) chosen[k] = a;
      } else if (item.substr(0, eq) == kind_name(kind)) {
        named = true;
        if (!supports(kind, a)) {
          throw_error(ErrorKind::kInvalidArgument, "JACCL_ALGO: ", kind_name(kind),
                      " has no algorithm '", algorithm_name(a), "'");
        }
        if (chosen[k] == Algorithm::kAuto) chosen[k] = a;
      }
    }
    if (!named) {
      throw_error(ErrorKind::kInvalidArgument, "JACCL_ALGO names an unknown op '",
                  item.substr(0, eq), "'");
    }
  }
  for (size_t k = 0; k < chosen.size(); ++k) overrides[k].store(chosen[k]);
}

Algorithm choose_algorithm(CollectiveKind kind, Algorithm requested, size_t bytes,
                           const GroupShape& group) {
  Algorithm chosen = requested;
  if (chosen != Algorithm::kAuto && !supports(kind, chosen)) {
    throw_error(ErrorKind::kInvalidArgument, kind_name(kind), " has no algorithm '",
                algorithm_name(chosen), "'");
  }
  if (chosen == Algorithm::kAuto) {
    // An override whose algorithm needs a layout applies to the groups that have it.
    const Algorithm o = overrides[static_cast<size_t>(kind)].load();
    if ((o != Algorithm::kCascade || group.process_runs) &&
        (o != Algorithm::kHierarchical || group.hierarchical)) {
      chosen = o;
    }
  }
  if (chosen == Algorithm::kAuto && group.in_process) chosen = Algorithm::kDirect;
  if (chosen == Algorithm::kAuto) {
    const bool small = bytes <= kNaiveMaxBytes || group.size <= 1;
    if (kind == CollectiveKind::kAllReduce && small) {
      chosen = Algorithm::kNaive;
    } else if (group.hierarchical && group.any_order && reduces(kind)) {
      chosen = Algorithm::kHierarchical;
    } else if (kind == CollectiveKind::kAllReduce && group.process_runs && group.one_host) {
      chosen = Algorithm::kCascade;
    } else {
      chosen = Algorithm::kMesh;
    }
  }
  return chosen;
}

}  // namespace jaccl
