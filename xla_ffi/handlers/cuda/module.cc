// The Python extension _jaccl_cuda: CUDA FFI handler capsules, the link to _jaccl's engine,
// the CUDA-ordinal -> global-device-id table, the peer registry's set-up (workspaces, IPC
// handles, reachable pairs) and kernel benchmarks for `jaccl-bench kernels`.
//
// Contract: importable on machines without a GPU (nothing touches CUDA at import); the
// set-up functions raise RuntimeError with CUDA's message on failure; the bench functions
// need a GPU (handlers/cuda_kernel_bench.h).
#include <cuda_runtime.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/call_sites.h"
#include "common/error.h"
#include "common/log.h"
#include "cuda/kernel_bench.h"
#include "cuda/peer_collectives.h"
#include "cuda/peer_group.h"
#include "handlers/cuda/symbols.h"
#include "cuda/peers.h"
#include "cuda/staging.h"
#include "xla/ffi/api/c_api.h"

namespace nb = nanobind;

namespace {

nb::dict registrations() {
  nb::dict d;
  d["jaccl_all_reduce"] = nb::capsule(reinterpret_cast<void*>(jaccl_cuda_all_reduce));
  d["jaccl_reduce_scatter"] = nb::capsule(reinterpret_cast<void*>(jaccl_cuda_reduce_scatter));
  d["jaccl_all_gather"] = nb::capsule(reinterpret_cast<void*>(jaccl_cuda_all_gather));
  d["jaccl_all_to_all"] = nb::capsule(reinterpret_cast<void*>(jaccl_cuda_all_to_all));
  d["jaccl_moe_dispatch"] = nb::capsule(reinterpret_cast<void*>(jaccl_cuda_moe_dispatch));
  d["jaccl_moe_combine"] = nb::capsule(reinterpret_cast<void*>(jaccl_cuda_moe_combine));
  d["jaccl_ppermute"] = nb::capsule(reinterpret_cast<void*>(jaccl_cuda_ppermute));
  d["jaccl_ragged_all_to_all"] = nb::capsule(reinterpret_cast<void*>(jaccl_cuda_ragged_all_to_all));
  return d;
}

}  // namespace

NB_MODULE(_jaccl_cuda, m) {
  m.def("registrations", &registrations);
  // The XLA FFI API version of the headers this module was built with: a jax whose own is
  // older refuses its handlers (jax_jaccl/_ext.py checks before registering).
  m.def("ffi_api_version", [] { return std::make_pair(XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR); });
  // Settings from jax_jaccl/_settings.py, before the world starts (bad values: ValueError).
  // The text of call sites, for the peer path's "ranks disagree" (common/call_sites.h: this
  // module keeps its own table; jax_jaccl/_call_site.py tells both modules).
  m.def("name_site", [](uint32_t site, const std::string& name) { jaccl::name_site(site, name); },
        nb::arg("site"), nb::arg("name"));
  m.def("configure", [](const std::string& path, size_t one_shot_bytes, const std::string& debug) {
    jaccl::cuda::PathMode mode = jaccl::cuda::parse_path_mode(path);
    jaccl::LogLevel level;
    try {
      level = jaccl::parse_log_level(debug);
    } catch (const jaccl::Error& e) {
      throw std::invalid_argument(e.what());
    }
    jaccl::cuda::set_path_mode(mode);
    jaccl::cuda::set_one_shot_limit_bytes(one_shot_bytes);
    jaccl::set_log_level(level);
  }, nb::arg("path"), nb::arg("one_shot_bytes"), nb::arg("debug"));
  m.def("set_engine", [](nb::capsule collectives, nb::capsule moe, nb::capsule abort) {
    jaccl::cuda::set_engine(reinterpret_cast<JacclRunHostCall>(collectives.data()));
    jaccl::cuda::set_moe_engine(reinterpret_cast<JacclRunHostMoe>(moe.data()));
    jaccl::cuda::set_abort_hook(reinterpret_cast<JacclRaiseAbort>(abort.data()));
  });
  m.def("set_device_ids", [](const std::vector<std::pair<int, int64_t>>& ids) {
    jaccl::Status s = jaccl::cuda::set_device_ids(ids);
    if (s.failure()) throw std::runtime_error(s.message());
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
  namespace bench = jaccl::cuda::bench;
  m.def("bench_copy", &bench::copy, nb::arg("bytes"), nb::arg("iters"));
  m.def("bench_reduce", &bench::reduce, nb::arg("dtype"), nb::arg("op"), nb::arg("srcs"), nb::arg("dst"),
        nb::arg("count"), nb::arg("iters"));
  m.def("bench_combine", &bench::combine, nb::arg("dtype"), nb::arg("out"), nb::arg("rows"),
        nb::arg("weights"), nb::arg("tokens"), nb::arg("topk"), nb::arg("hidden"), nb::arg("iters"));
  m.def("bench_gather", &bench::gather, nb::arg("dst"), nb::arg("src"), nb::arg("rows"), nb::arg("n"),
        nb::arg("row_bytes"), nb::arg("iters"));
  m.def("bench_pack", &bench::pack, nb::arg("staging"), nb::arg("src"), nb::arg("src_rows"), nb::arg("rows"),
        nb::arg("offsets"), nb::arg("groups"), nb::arg("capacity"), nb::arg("row_bytes"), nb::arg("iters"));
}
