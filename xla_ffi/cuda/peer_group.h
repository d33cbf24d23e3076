// One group of the peer path as a schedule sees it: the members' workspaces (staging areas,
// flags) and the barrier between them.
//
// Contract: path_mode() is JACCL_CUDA_PATH (auto, peer or staged); group_members() finds the
// group of `device` in a call's group table (empty if none) and its rank; count_call()
// and path_counts() keep how many calls took each path (for tests). A PeerGroup is
// built for one call while the device's mutex is held; barrier() enqueues one
// barrier of the whole group on `stream` (advancing this device's per-pair counts), start
// barriers publishing and checking `call` (kDescriptorWords words every rank must agree on).
// peer_path_group() says whether a group can take the peer path at all (every pair of
// members reachable both ways, at most kMaxPeers members, this device has a workspace): the
// answer is the same on every rank.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cuda/kernels/peer_kernels.h"
#include "cuda/peers.h"

namespace jaccl::cuda {

// JACCL_CUDA_PATH as the host set it (configure()): auto, peer or staged.
enum class PathMode { kAuto, kPeer, kStaged };
PathMode path_mode();
void set_path_mode(PathMode mode);
PathMode parse_path_mode(const std::string& name);  // throws std::invalid_argument
std::vector<int64_t> group_members(const int64_t* groups, size_t groups_len, int64_t group_size,
                                   int64_t device, int* rank);
void count_call(bool peer);
std::pair<uint64_t, uint64_t> path_counts();

bool peer_path_group(const LocalDevice* me, const std::vector<int64_t>& members);

class PeerGroup {
 public:
  PeerGroup(LocalDevice& me, const std::vector<int64_t>& members, int rank);

  int size() const { return static_cast<int>(members_.size()); }
  int rank() const { return rank_; }
  LocalDevice& me() const { return me_; }
  char* staging(int q) const { return peers_[q]->workspace.data; }
  uint64_t hash() const { return hash_; }  // names the group in descriptors

  cudaError_t barrier(bool start, const uint64_t (&call)[kDescriptorWords], cudaStream_t stream);

 private:
  LocalDevice& me_;
  const std::vector<int64_t>& members_;
  const int rank_;
  uint64_t hash_ = 0;
  std::vector<const Peer*> peers_;
};

}  // namespace jaccl::cuda
