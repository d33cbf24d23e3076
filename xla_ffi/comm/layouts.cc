#include "comm/layouts.h"

#include <algorithm>
#include <map>

namespace jaccl {

int process_run(const std::vector<int64_t>& process_of_rank) {
  const std::vector<int64_t>& p = process_of_rank;
  const int n = static_cast<int>(p.size());
  int run = 1;
  while (run < n && p[run] == p[0]) ++run;
  if (run < 2 || run == n || n % run != 0) return 0;
  std::vector<int64_t> seen;
  for (int start = 0; start < n; start += run) {
    if (std::find(seen.begin(), seen.end(), p[start]) != seen.end()) return 0;
    seen.push_back(p[start]);
    for (int r = start; r < start + run; ++r) {
      if (p[r] != p[start]) return 0;
    }
  }
  return run;
}

bool spans_hosts_evenly(const std::vector<int64_t>& host_of_rank) {
  std::map<int64_t, int> ranks_on;
  for (int64_t host : host_of_rank) ++ranks_on[host];
  if (ranks_on.size() < 2) return false;
  const int each = ranks_on.begin()->second;
  return each > 1 && std::all_of(ranks_on.begin(), ranks_on.end(),
                                 [&](const auto& h) { return h.second == each; });
}

}  // namespace jaccl
