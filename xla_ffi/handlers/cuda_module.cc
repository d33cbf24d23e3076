// The Python extension _jaccl_cuda: CUDA FFI handler capsules, the link to _jaccl's engine,
// the CUDA-ordinal -> global-device-id table, the peer registry's set-up (workspaces, IPC
// handles, reachable pairs) and kernel benchmarks for `jaccl-bench kernels`.
//
// Contract: importable on machines without a GPU (nothing touches CUDA at import); the
// set-up functions raise RuntimeError with CUDA's message on failure; the bench functions
// need a GPU and time with CUDA events on device 0, returning seconds per call.
#include <cuda_runtime.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/kernels.h"
#include "handlers/cuda_handlers.h"
#include "handlers/cuda_peer_group.h"
#include "handlers/cuda_peers.h"
#include "handlers/cuda_staging.h"

namespace nb = nanobind;

namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

// Runs `launch` once to warm up, then `iters` times between two events.
template <typename Launch>
double timed(int iters, Launch&& launch) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  launch();
  check(cudaEventRecord(start, 0), "cudaEventRecord");
  for (int i = 0; i < iters; ++i) launch();
  check(cudaEventRecord(stop, 0), "cudaEventRecord");
  check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / 1e3 / iters;
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { check(cudaMalloc(&p, bytes), "cudaMalloc"); cudaMemset(p, 0, bytes); }
  ~DeviceBuffer() { cudaFree(p); }
};

double bench_copy(size_t bytes, int iters) {
  DeviceBuffer a(bytes), b(bytes);
  return timed(iters, [&] { check(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, 0), "copy"); });
}

double bench_reduce(int dtype, int op, size_t count, int operands, int iters) {
  const size_t bytes = count * jaccl::dtype_size(static_cast<jaccl::Dtype>(dtype));
  std::vector<DeviceBuffer*> srcs;
  std::vector<const void*> ptrs;
  for (int k = 0; k < operands; ++k) {
    srcs.push_back(new DeviceBuffer(bytes));
    ptrs.push_back(srcs.back()->p);
  }
  DeviceBuffer dst(bytes);
  double s = timed(iters, [&] {
    check(jaccl::cuda::launch_reduce(static_cast<jaccl::ReduceOp>(op), static_cast<jaccl::Dtype>(dtype),
                                     dst.p, ptrs.data(), operands, count, 0), "reduce");
  });
  for (auto* b : srcs) delete b;
  return s;
}

double bench_combine(int dtype, size_t tokens, size_t topk, size_t hidden, size_t rows, int iters) {
  const size_t esize = jaccl::dtype_size(static_cast<jaccl::Dtype>(dtype));
  DeviceBuffer y(rows * hidden * esize), out(tokens * hidden * esize), weights(tokens * topk * 4),
      table(tokens * topk * sizeof(void*));
  std::vector<const void*> host(tokens * topk);
  std::mt19937 rng(0);
  for (auto& p : host) p = static_cast<char*>(y.p) + (rng() % rows) * hidden * esize;
  check(cudaMemcpy(table.p, host.data(), host.size() * sizeof(void*), cudaMemcpyHostToDevice), "table");
  return timed(iters, [&] {
    check(jaccl::cuda::launch_moe_combine(static_cast<jaccl::Dtype>(dtype), out.p,
                                          static_cast<const void* const*>(table.p),
                                          static_cast<const float*>(weights.p), tokens, topk, hidden, 0),
          "combine");
  });
}

nb::dict registrations() {
  nb::dict d;
  d["jaccl_all_reduce"] = nb::capsule(reinterpret_cast<void*>(jaccl_cuda_all_reduce));
  d["jaccl_reduce_scatter"] = nb::capsule(reinterpret_cast<void*>(jaccl_cuda_reduce_scatter));
  d["jaccl_all_gather"] = nb::capsule(reinterpret_cast<void*>(jaccl_cuda_all_gather));
  d["jaccl_all_to_all"] = nb::capsule(reinterpret_cast<void*>(jaccl_cuda_all_to_all));
  d["jaccl_moe_exchange"] = nb::capsule(reinterpret_cast<void*>(jaccl_cuda_moe_exchange));
  d["jaccl_moe_combine"] = nb::capsule(reinterpret_cast<void*>(jaccl_cuda_moe_combine));
  return d;
}

}  // namespace

NB_MODULE(_jaccl_cuda, m) {
  m.def("registrations", &registrations);
  m.def("set_engine", [](nb::capsule collectives, nb::capsule moe, nb::capsule abort) {
    jaccl::cuda::set_engine(reinterpret_cast<JacclRunHostCall>(collectives.data()));
    jaccl::cuda::set_moe_engine(reinterpret_cast<JacclRunHostMoe>(moe.data()));
    jaccl::cuda::set_abort_hook(reinterpret_cast<JacclRaiseAbort>(abort.data()));
  });
  m.def("set_device_ids", [](const std::vector<std::pair<int, int64_t>>& ids) {
    xla::ffi::Error e = jaccl::cuda::set_device_ids(ids);
    if (e.failure()) throw std::runtime_error(e.message());
  });
  m.def("drain", &jaccl::cuda::drain, nb::arg("timeout_s"),
        nb::call_guard<nb::gil_scoped_release>());
  m.def("device_count", [] {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
  });
  m.def("create_workspace", [](int ordinal, int64_t device, int process, int64_t world_devices,
                               int world_processes, size_t data_bytes, double timeout_s) {
    auto [handle, bus] = jaccl::cuda::create_workspace(ordinal, device, process, world_devices,
                                                       world_processes, data_bytes, timeout_s);
    return nb::make_tuple(nb::bytes(handle.data(), handle.size()), bus);
  }, nb::arg("ordinal"), nb::arg("device"), nb::arg("process"), nb::arg("world_devices"),
        nb::arg("world_processes"), nb::arg("data_bytes"), nb::arg("timeout_s"));
  m.def("open_peer", [](int64_t device, int process, int pid, nb::bytes handle,
                        const std::string& bus_id, size_t data_bytes) {
    std::string why;
    const bool ok = jaccl::cuda::open_peer(device, process, pid,
                                           std::string(handle.c_str(), handle.size()), bus_id,
                                           data_bytes, &why);
    return nb::make_tuple(ok, why);
  }, nb::arg("device"), nb::arg("process"), nb::arg("pid"), nb::arg("handle"), nb::arg("bus_id"),
        nb::arg("data_bytes"));
  m.def("readable_pairs", &jaccl::cuda::readable_pairs);
  m.def("set_reachable", &jaccl::cuda::set_reachable);
  m.def("any_failure", [] { return jaccl::cuda::any_failure() || jaccl::cuda::any_pending_error(); });
  m.def("path_counts", &jaccl::cuda::path_counts);
  m.def("bench_copy", &bench_copy, nb::arg("bytes"), nb::arg("iters"));
  m.def("bench_reduce", &bench_reduce, nb::arg("dtype"), nb::arg("op"), nb::arg("count"),
        nb::arg("operands"), nb::arg("iters"));
  m.def("bench_combine", &bench_combine, nb::arg("dtype"), nb::arg("tokens"), nb::arg("topk"),
        nb::arg("hidden"), nb::arg("rows"), nb::arg("iters"));
}
