#include "cuda/peer_group.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>

namespace jaccl::cuda {
namespace {

std::atomic<uint64_t> peer_calls{0}, staged_calls{0};
std::atomic<PathMode> path_setting{PathMode::kAuto};

}  // namespace

PathMode path_mode() { return path_setting.load(std::memory_order_relaxed); }

void set_path_mode(PathMode mode) { path_setting.store(mode, std::memory_order_relaxed); }

PathMode parse_path_mode(const std::string& name) {
  if (name == "auto") return PathMode::kAuto;
  if (name == "peer") return PathMode::kPeer;
  if (name == "staged") return PathMode::kStaged;
  throw std::invalid_argument("jaccl: JACCL_CUDA_PATH must be auto, peer or staged, not '" +
                              name + "'");
}

// The members (global device ids, in rank order) of the group `device` belongs to: its row of
// the table, without the -1 padding of groups smaller than others.
std::vector<int64_t> group_members(const int64_t* groups, size_t groups_len, int64_t group_size,
                                   int64_t device, int* rank) {
  const size_t n = static_cast<size_t>(group_size);
  for (size_t g = 0; n > 0 && g + n <= groups_len; g += n) {
    for (size_t r = 0; r < n; ++r) {
      if (groups[g + r] == device) {
        *rank = static_cast<int>(r);
        return std::vector<int64_t>(groups + g, std::find(groups + g, groups + g + n, -1));
      }
    }
  }
  return {};
}

void count_call(bool peer) {
  (peer ? peer_calls : staged_calls).fetch_add(1, std::memory_order_relaxed);
}

std::pair<uint64_t, uint64_t> path_counts() { return {peer_calls.load(), staged_calls.load()}; }

bool peer_path_group(const LocalDevice* me, const std::vector<int64_t>& members) {
  if (me == nullptr || members.size() > static_cast<size_t>(kMaxPeers)) return false;
  for (int64_t a : members) {
    if (peer(a) == nullptr) return false;
    for (int64_t b : members) {
      if (!reachable(a, b)) return false;
    }
  }
  return true;
}

PeerGroup::PeerGroup(LocalDevice& me, const std::vector<int64_t>& members, int rank)
    : me_(me), members_(members), rank_(rank) {
  hash_ = 1469598103934665603ull;  // FNV-1a over the member ids
  for (int64_t m : members) {
    peers_.push_back(peer(m));
    hash_ ^= static_cast<uint64_t>(m);
    hash_ *= 1099511628211ull;
  }
}

cudaError_t PeerGroup::barrier(bool start, const uint64_t (&call)[kDescriptorWords],
                               cudaStream_t stream) {
  BarrierArgs args;
  args.n = size();
  args.rank = rank_;
  for (int q = 0; q < size(); ++q) {
    if (q == rank_) continue;
    const int64_t g = members_[q];
    args.signal[q] = peers_[q]->workspace.flags + me_.device;
    args.arrived[q] = me_.workspace.flags + g;
    args.value[q] = ++me_.barriers[static_cast<size_t>(g)];
    args.device[q] = g;
    args.process[q] = peers_[q]->process;
    args.descriptor[q] = peers_[q]->workspace.descriptor;
    args.abort_peer[q] = peers_[q]->workspace.abort;
  }
  args.aborted = me_.workspace.abort;
  args.self = me_.device;
  args.dead = dead_processes();
  args.check = start;
  args.my_descriptor = me_.workspace.descriptor;
  for (int i = 0; i < kDescriptorWords; ++i) args.call[i] = call[i];
  args.timeout_ns = timeout_ns();
  args.status = me_.status_device;
  return launch_barrier(args, stream);
}

}  // namespace jaccl::cuda
