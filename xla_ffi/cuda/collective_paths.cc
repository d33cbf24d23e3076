#include "cuda/collective_paths.h"

#include <algorithm>
#include <string>
#include <vector>

#include "collectives/kinds.h"
#include "common/dtype.h"
#include "common/error.h"
#include "common/log.h"
#include "common/text.h"
#include "cuda/kernels/kernels.h"
#include "cuda/peer_collectives.h"
#include "cuda/peer_group.h"
#include "cuda/peers.h"
#include "cuda/staging.h"

namespace jaccl::cuda {
namespace {

size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

Status failed(ErrorKind kind, std::string why) { return Status::Failure(kind, std::move(why)); }

void log_path(CollectiveKind kind, size_t bytes, int64_t device, size_t n, const char* path) {
  if (log_level() < LogLevel::kInfo) return;
  const int size_class = jaccl::size_class(bytes);
  if (!first_time(text("cuda/", static_cast<int>(kind), "/", size_class, "/", device, "/", path))) {
    return;
  }
  log(LogLevel::kInfo, kind_name(kind), " ", bytes, " B (<= 2^", size_class, ") on GPU device ",
      device, ", group of ", n, ": ", path);
}

// Device buffers -> pinned host memory -> the CPU engine (on the device's worker thread) ->
// back, all ordered on the stream. The input goes to host memory; so do ragged_all_to_all's
// output (it keeps the rows nothing arrives at) and index arrays.
Status staged(const CollectiveRequest& r, int ordinal, cudaStream_t stream, HostEngine host) {
  const bool ragged = r.address.kind == CollectiveKind::kRaggedAllToAll;
  const size_t in_bytes = r.in_count * dtype_size(r.address.dtype);
  const size_t out_bytes = r.out_count * dtype_size(r.address.dtype);
  size_t at = aligned(in_bytes);
  const size_t out_at = at;
  at += aligned(out_bytes);
  size_t index_at[4] = {};
  for (int i = 0; ragged && i < 4; ++i) {
    index_at[i] = at;
    at += aligned(r.ragged[i].count * r.ragged[i].bytes);
  }
  StagedCall staging;
  Status result = StagedCall::begin(ordinal, stream, at, &staging);
  auto to_host = [&](size_t offset, const void* device, size_t bytes, const char* what) {
    if (result.failure() || bytes == 0) return;
    cudaError_t err = cudaMemcpyAsync(staging.host() + offset, device, bytes,
                                      cudaMemcpyDeviceToHost, stream);
    if (err != cudaSuccess) result = cuda_error(err, what);
  };
  to_host(0, r.in, in_bytes, "staging a collective's input");
  if (ragged) {
    to_host(out_at, r.out, out_bytes, "staging ragged_all_to_all's output");
    for (int i = 0; i < 4; ++i) {
      to_host(index_at[i], r.ragged[i].data, r.ragged[i].count * r.ragged[i].bytes,
              "staging ragged_all_to_all's indices");
    }
  }
  if (result.success()) {
    char* h = staging.host();
    CollectiveRequest on_host = r;
    on_host.in = h;
    on_host.out = h + out_at;
    for (int i = 0; ragged && i < 4; ++i) on_host.ragged[i].data = h + index_at[i];
    std::vector<int64_t> groups(r.address.groups, r.address.groups + r.address.groups_len);
    std::vector<int64_t> pairs(r.pairs, r.pairs + r.pairs_len);
    result = staging.enqueue([on_host, host, groups = std::move(groups),
                              pairs = std::move(pairs)](char* error, size_t len) mutable {
      on_host.address.groups = groups.data();
      on_host.pairs = pairs.data();
      return host(on_host, error, len);
    });
  }
  if (result.success() && out_bytes > 0) {
    cudaError_t err = cudaMemcpyAsync(r.out, staging.host() + out_at, out_bytes,
                                      cudaMemcpyHostToDevice, stream);
    if (err != cudaSuccess) result = cuda_error(err, "copying a collective's result back");
  }
  if (result.failure()) raise_abort(result.message());  // the peers' engine jobs stop too
  return result;
}

// A group of one: the input is the output (ppermute: unless no pair sends to it, zeros; a
// reduction: a fold of one operand, whose float sum of -0 is +0, max or min of NaN ±inf).
Status alone(const CollectiveRequest& r, bool receives, cudaStream_t stream) {
  const Dtype dtype = r.address.dtype;
  const size_t bytes = r.out_count * dtype_size(dtype);
  if (!receives) {
    cudaError_t err = cudaMemsetAsync(r.out, 0, bytes, stream);
    return err == cudaSuccess ? Status::Ok() : cuda_error(err, "zeroing a ppermute result");
  }
  if (reduces(r.address.kind)) {
    const void* in = r.in;
    cudaError_t err = launch_reduce(r.op, dtype, r.out, &in, 1, r.out_count, stream);
    return err == cudaSuccess ? Status::Ok() : cuda_error(err, "reducing a group of one");
  }
  if (r.out == r.in || bytes == 0) return Status::Ok();
  cudaError_t err = cudaMemcpyAsync(r.out, r.in, bytes, cudaMemcpyDeviceToDevice, stream);
  return err == cudaSuccess ? Status::Ok() : cuda_error(err, "copying a group of one");
}

}  // namespace

Status find_call_group(int ordinal, const int64_t* groups, size_t groups_len, int64_t group_size,
                       CallGroup* g) {
  if (Status s = global_device(ordinal, &g->device); s.failure()) return s;
  if (std::string why = pending_error(ordinal); !why.empty()) {
    return failed(ErrorKind::kPeerFailure, "jaccl: an earlier collective on this GPU failed: " + why);
  }
  g->local = local_device(ordinal);
  if (g->local != nullptr) {
    if (std::string why = failure(*g->local); !why.empty()) return failed(ErrorKind::kPeerFailure, why);
  }
  g->members = group_members(groups, groups_len, group_size, g->device, &g->rank);
  if (g->members.empty()) {
    return failed(ErrorKind::kInvalidArgument, text("jaccl: device ", g->device,
                                                    " is in none of the call's groups"));
  }
  return Status::Ok();
}

Status run_on_gpu(CollectiveRequest r, int ordinal, cudaStream_t stream, HostEngine host) {
  if (host == nullptr) {
    return failed(ErrorKind::kFailedPrecondition,
                  "jaccl: the CUDA handlers have no engine (import jax_jaccl first)");
  }
  CallAddress& at = r.address;
  CallGroup g;
  if (Status s = find_call_group(ordinal, at.groups, at.groups_len, at.group_size, &g);
      s.failure()) {
    return s;
  }
  at.device = g.device;
  LocalDevice* local = g.local;
  const std::vector<int64_t>& members = g.members;
  const int rank = g.rank;
  Permutation partners;
  try {
    partners = check_request(r, static_cast<int>(members.size()), rank);
  } catch (const Error& e) {
    return failed(e.kind(), e.what());
  }
  const bool ragged = at.kind == CollectiveKind::kRaggedAllToAll;
  const int source = at.kind == CollectiveKind::kPermute ? partners.receive_from : rank;
  if (members.size() == 1 && !ragged) return alone(r, source >= 0, stream);
  const size_t bytes = std::max(r.in_count, r.out_count) * dtype_size(at.dtype);
  const PathMode mode = path_mode();
  if (mode != PathMode::kStaged && !ragged && peer_path_group(local, members)) {
    const bool one_shot = at.kind == CollectiveKind::kAllReduce &&
        peer_all_reduce_algorithm(r.algorithm, bytes) == Algorithm::kNaive;
    log_path(at.kind, bytes, at.device, members.size(),
             at.kind != CollectiveKind::kAllReduce ? "peer path" : one_shot ? "peer path, one-shot"
                                                                            : "peer path, two-shot");
    count_call(/*peer=*/true);
    cudaError_t err = run_peer_collective(*local, members, rank, r, source, stream);
    return err == cudaSuccess ? Status::Ok() : cuda_error(err, "enqueueing a peer collective");
  }
  if (mode == PathMode::kPeer) {
    if (ragged) {
      return failed(ErrorKind::kFailedPrecondition,
                    "jaccl: JACCL_CUDA_PATH=peer, but ragged_all_to_all has no peer path (it is "
                    "staged through host memory)");
    }
    return failed(ErrorKind::kFailedPrecondition,
                  text("jaccl: JACCL_CUDA_PATH=peer but the group of device ", at.device,
                       " cannot take the peer path (it needs every member on this host, mapped "
                       "both ways, at most ", kMaxPeers, " members)"));
  }
  log_path(at.kind, bytes, at.device, members.size(), "staged through host memory");
  count_call(/*peer=*/false);
  return staged(r, ordinal, stream, host);
}

}  // namespace jaccl::cuda
