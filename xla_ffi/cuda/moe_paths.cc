#include "cuda/moe_paths.h"

#include <string>
#include <tuple>
#include <vector>

#include "common/error.h"
#include "common/text.h"
#include "cuda/collective_paths.h"
#include "cuda/peer_group.h"
#include "cuda/peer_moe.h"
#include "cuda/peers.h"
#include "cuda/staging.h"

namespace jaccl::cuda {
namespace {

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Copies every operand the request points at (device memory) into pinned host memory, runs the
// engine on the host copies, and copies the result back into the request's (device) output.
Status staged_moe(int ordinal, cudaStream_t stream, const MoeRequest& c, HostMoeEngine engine) {
  MoeRequest on_host = c;
  // (where the field of on_host lives, the device data, its bytes)
  std::vector<std::tuple<const void**, const void*, size_t>> inputs;
  inputs.emplace_back(&on_host.rows, c.rows,
                      c.rows_count * c.row_elems * dtype_size(c.address.dtype));
  for (int i = 0; i < 4; ++i) {
    inputs.emplace_back(reinterpret_cast<const void**>(&on_host.lists[i]), c.lists[i],
                        c.list_counts[i] * sizeof(int32_t));
  }
  if (c.address.kind == CollectiveKind::kMoeDispatch) {
    inputs.emplace_back(reinterpret_cast<const void**>(&on_host.topk_idx), c.topk_idx,
                        c.topk_count * sizeof(int32_t));
  } else {
    inputs.emplace_back(&on_host.extra, c.extra, c.extra_count * dtype_size(c.extra_dtype));
  }
  size_t total = 0;
  for (const auto& input : inputs) total = round_up(total + std::get<2>(input), 256);
  const size_t result_bytes = out_bytes(c);
  StagedCall staging;
  Status result = StagedCall::begin(ordinal, stream, total + result_bytes, &staging);
  if (result.success()) {
    char* host = staging.host();
    size_t offset = 0;
    for (const auto& [field, device, bytes] : inputs) {
      *field = host + offset;
      if (bytes > 0 && result.success()) {
        cudaError_t err = cudaMemcpyAsync(host + offset, device, bytes, cudaMemcpyDeviceToHost, stream);
        if (err != cudaSuccess) result = cuda_error(err, "staging an MoE operand");
      }
      offset = round_up(offset + bytes, 256);
    }
    on_host.out = host + total;
    if (result.success()) {
      const CallAddress& at = c.address;
      result = staging.enqueue([on_host, engine, groups = std::vector<int64_t>(
                                    at.groups, at.groups + at.groups_len)](char* error,
                                                                           size_t len) mutable {
        on_host.address.groups = groups.data();
        return engine(on_host, error, len);
      });
    }
    if (result.success()) {
      cudaError_t err = cudaMemcpyAsync(c.out, host + total, result_bytes, cudaMemcpyHostToDevice, stream);
      if (err != cudaSuccess) result = cuda_error(err, "copying an MoE result back");
    }
  }
  if (result.failure()) raise_abort(result.message());  // the peers' engine jobs stop too
  return result;
}

Status failed(ErrorKind kind, std::string why) { return Status::Failure(kind, std::move(why)); }

}  // namespace

Status run_moe_on_gpu(MoeRequest c, int ordinal, cudaStream_t stream, HostMoeEngine host) {
  if (host == nullptr) {
    return failed(ErrorKind::kFailedPrecondition,
                  "jaccl: the CUDA handlers have no engine (import jax_jaccl first)");
  }
  CallAddress& at = c.address;
  CallGroup g;
  if (Status s = find_call_group(ordinal, at.groups, at.groups_len, at.group_size, &g);
      s.failure()) {
    return s;
  }
  at.device = g.device;
  LocalDevice* local = g.local;
  const std::vector<int64_t>& members = g.members;
  const int rank = g.rank;
  try {
    check_moe_request(c, static_cast<int>(members.size()));
  } catch (const Error& e) {
    return failed(e.kind(), e.what());
  }
  const PathMode mode = path_mode();
  if (mode != PathMode::kStaged && peer_path_group(local, members)) {
    if (peer_moe_fits(*local, c)) {
      count_call(/*peer=*/true);
      cudaError_t err = run_peer_moe(*local, members, rank, c, stream);
      return err == cudaSuccess ? Status::Ok() : cuda_error(err, "enqueueing a peer MoE op");
    }
    if (mode == PathMode::kPeer) {
      return failed(ErrorKind::kFailedPrecondition,
                    text("jaccl: JACCL_CUDA_PATH=peer but this MoE op's rows (",
                         c.list_counts[kSendRows] * c.row_elems * dtype_size(at.dtype) >> 20,
                         " MiB) do not fit the staging area: raise JACCL_CUDA_BUFFER_MB"));
    }
  } else if (mode == PathMode::kPeer) {
    return failed(ErrorKind::kFailedPrecondition,
                  "jaccl: JACCL_CUDA_PATH=peer but this MoE op's group cannot take the peer path");
  }
  count_call(/*peer=*/false);
  return staged_moe(ordinal, stream, c, host);
}

}  // namespace jaccl::cuda
