// The Python extension _jaccl: FFI handler capsules and the world's
// life cycle, as called by jax_jaccl/_bootstrap.py.
//
// Contract: registrations() may be called at import; init_world() once per
// process, then attach_peers() and unlink_own_segment() at the bootstrap's
// synchronisation points; shutdown() releases everything (also at exit).
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <numeric>
#include <tuple>
#include <utility>
#include <vector>

#include "abi/host_abi.h"
#include "abi/mpiabi_attach.h"
#include "collectives/call_times.h"
#include "collectives/collectives.h"
#include "collectives/device_threads.h"
#include "collectives/kinds.h"
#include "comm/communicator.h"
#include "comm/frame_stream.h"
#include "comm/layouts.h"
#include "comm/world.h"
#include "common/call_sites.h"
#include "common/error.h"
#include "common/log.h"
#include "common/reduce.h"
#include "handlers/cpu/ofi_module.h"
#include "handlers/cpu/symbols.h"
#include "handlers/order_operand.h"
#include "moe/moe.h"
#include "transport/tcp/socket.h"
#include "xla/ffi/api/c_api.h"

namespace nb = nanobind;

namespace {

template <typename T>
nb::capsule capsule(T* fn) {
  return nb::capsule(reinterpret_cast<void*>(fn));
}

nb::dict registrations() {
  nb::dict d;
  d["jaccl_all_reduce"] = capsule(jaccl_all_reduce);
  d["jaccl_reduce_scatter"] = capsule(jaccl_reduce_scatter);
  d["jaccl_all_gather"] = capsule(jaccl_all_gather);
  d["jaccl_all_to_all"] = capsule(jaccl_all_to_all);
  d["jaccl_moe_dispatch"] = capsule(jaccl_moe_dispatch);
  d["jaccl_moe_combine"] = capsule(jaccl_moe_combine);
  d["jaccl_ppermute"] = capsule(jaccl_ppermute);
  d["jaccl_ragged_all_to_all"] = capsule(jaccl_ragged_all_to_all);
  d["jaccl_ragged_all_to_all_into_zeros"] = capsule(jaccl_ragged_all_to_all_into_zeros);
  return d;
}

// The TCP listener made before the processes exchanged endpoints; init_world adopts it.
std::unique_ptr<jaccl::tcp::TcpTransport>& pending_network() {
  static std::unique_ptr<jaccl::tcp::TcpTransport> network;
  return network;
}

int tcp_listen(const std::string& ip, int port) {
  pending_network() = std::make_unique<jaccl::tcp::TcpTransport>(ip, port);
  return pending_network()->endpoint().port;
}

void init_world(int my_process,
                const std::vector<std::tuple<int, int, std::string, int>>& processes,
                const std::vector<std::tuple<int64_t, int>>& devices, const std::string& job_tag,
                size_t payload_bytes, int num_slots, double timeout_s, int spin_us,
                const std::vector<std::string>& endpoints, const std::string& secret,
                int tcp_stripes, const std::string& transport, const std::string& ofi_provider,
                const std::string& ofi_why, const std::string& ofi_mode, bool shared_channels,
                bool xla_streams, bool evict_stalled) {
  jaccl::WorldConfig config;
  config.my_process = my_process;
  for (const auto& [index, pid, host, jax_index] : processes) {
    config.processes.push_back(jaccl::ProcessInfo{index, pid, host, jax_index});
  }
  for (const auto& [id, process] : devices) config.devices.push_back(jaccl::DeviceInfo{id, process});
  config.job_tag = job_tag;
  config.payload_bytes = payload_bytes;
  config.num_slots = num_slots;
  config.timeout_s = timeout_s;
  config.spin_us = spin_us;
  config.endpoints = endpoints;
  config.secret = secret;
  config.tcp_stripes = tcp_stripes;
  if (transport == "none") {
    config.network = jaccl::Network::kNone;
  } else if (transport == "tcp") {
    config.network = jaccl::Network::kTcp;
  } else if (transport == "ofi") {
    config.network = jaccl::Network::kOfi;
  } else {
    jaccl::throw_error(jaccl::ErrorKind::kInvalidArgument, "transport \"", transport,
                       "\": none, tcp or ofi");
  }
  config.ofi_provider = ofi_provider;
  config.ofi_why = ofi_why;
  config.ofi_mode = ofi_mode;
  config.shared_channels = shared_channels;
  config.xla_streams = xla_streams;
  config.evict_stalled = evict_stalled;
  if (pending_network()) config.ip = pending_network()->endpoint().host;
  jaccl::World::create(config, std::move(pending_network()));
}

// Settings from jax_jaccl/_settings.py; all are checked before any takes effect.
void configure(const std::string& algorithm, const std::string& debug,
               const std::string& moe_schedule, int moe_local_delay_us, int64_t async_min_bytes,
               int64_t single_copy_min_bytes) {
  try {
    const jaccl::LogLevel level = jaccl::parse_log_level(debug);
    const jaccl::MoeSchedule schedule = jaccl::parse_moe_schedule(moe_schedule);
    jaccl::set_algorithm_overrides(algorithm);
    jaccl::set_log_level(level);
    jaccl::set_moe_schedule(schedule);
    jaccl::set_moe_local_delay_us(moe_local_delay_us);
    jaccl::set_async_min_bytes(async_min_bytes);
    jaccl::set_single_copy_min_bytes(single_copy_min_bytes);
  } catch (const jaccl::Error& e) {
    throw std::invalid_argument(e.what());
  }
}

// The numeric codes Python puts in FFI attributes, and which algorithms each op has
// (jax_jaccl/_codes.py reads them here rather than keep a copy).
nb::dict codes() {
  nb::dict reduce_ops, algorithms, kinds, supported;
  for (int op = 0; op < static_cast<int>(jaccl::ReduceOp::kCount); ++op) {
    reduce_ops[jaccl::reduce_op_name(static_cast<jaccl::ReduceOp>(op))] = op;
  }
  for (jaccl::Algorithm a : jaccl::all_algorithms()) {
    algorithms[jaccl::algorithm_name(a)] = static_cast<int>(a);
  }
  for (jaccl::CollectiveKind kind : jaccl::all_kinds()) {
    kinds[jaccl::kind_name(kind)] = static_cast<int>(kind);
    nb::list names;
    for (jaccl::Algorithm a : jaccl::all_algorithms()) {
      if (jaccl::supports(kind, a)) names.append(jaccl::algorithm_name(a));
    }
    supported[jaccl::kind_name(kind)] = names;
  }
  nb::dict d;
  d["reduce_ops"] = reduce_ops;
  d["algorithms"] = algorithms;
  d["kinds"] = kinds;
  d["supported_algorithms"] = supported;
  return d;
}

}  // namespace

NB_MODULE(_jaccl, m) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const jaccl::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
  m.def("registrations", &registrations);
  // The XLA FFI API version of the headers this module was built with: a jax whose own is
  // older refuses its handlers (jax_jaccl/_ext.py checks before registering).
  m.def("ffi_api_version", [] { return std::make_pair(XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR); });
  m.def("configure", &configure, nb::arg("algorithm"), nb::arg("debug"), nb::arg("moe_schedule"),
        nb::arg("moe_local_delay_us"), nb::arg("async_min_bytes"),
        nb::arg("single_copy_min_bytes") = 256 * 1024);
  m.def("codes", &codes);
  // For _jaccl_cuda: the engine's entry point for collectives on host buffers.
  m.def("engine_api", [] { return capsule(jaccl_run_host_call); });
  m.def("engine_moe_api", [] { return capsule(jaccl_run_host_moe); });
  m.def("engine_abort_api", [] { return capsule(jaccl_raise_abort); });
  m.def("init_world", &init_world, nb::arg("my_process"), nb::arg("processes"),
        nb::arg("devices"), nb::arg("job_tag"), nb::arg("payload_bytes"), nb::arg("num_slots"),
        nb::arg("timeout_s"), nb::arg("spin_us"), nb::arg("endpoints"), nb::arg("secret"),
        nb::arg("tcp_stripes"), nb::arg("transport") = "tcp", nb::arg("ofi_provider") = "",
        nb::arg("ofi_why") = "", nb::arg("ofi_mode") = "auto", nb::arg("shared_channels") = false,
        nb::arg("xla_streams") = false, nb::arg("evict_stalled") = false);
  define_ofi_functions(m);
  // XLA:CPU's own collectives on this engine (abi/mpiabi_attach.h).
  m.def("mpiabi_attach", [](const std::string& path) {
    try {
      jaccl::attach_mpiabi(path);
    } catch (const jaccl::Error& e) {
      throw std::invalid_argument(e.what());
    }
  }, nb::arg("path"));
  m.def("tcp_listen", &tcp_listen, nb::arg("ip"), nb::arg("port") = 0);
  // jaccl-bench transport: frames one way between two devices (comm/frame_stream.h).
  m.def("send_frames", [](int64_t src, int64_t dst, size_t payload, int count, double timeout_s) {
    jaccl::send_frames(jaccl::World::require(), src, dst, payload, count, jaccl::Deadline(timeout_s));
  }, nb::arg("src"), nb::arg("dst"), nb::arg("payload"), nb::arg("count"), nb::arg("timeout_s"),
        nb::call_guard<nb::gil_scoped_release>());
  m.def("receive_frames", [](int64_t src, int64_t dst, size_t payload, int count, double timeout_s) {
    return jaccl::receive_frames(jaccl::World::require(), src, dst, payload, count,
                                 jaccl::Deadline(timeout_s));
  }, nb::arg("src"), nb::arg("dst"), nb::arg("payload"), nb::arg("count"), nb::arg("timeout_s"),
        nb::call_guard<nb::gil_scoped_release>());
  m.def("interface_address", &jaccl::tcp::interface_address, nb::arg("ifname"));
  m.def("address_towards", &jaccl::tcp::address_towards, nb::arg("host"));
  m.def("attach_peers", [] { jaccl::World::require().attach_peers(); },
        nb::call_guard<nb::gil_scoped_release>());
  m.def("unlink_own_segment", [] { jaccl::World::require().unlink_own_segment(); });
  m.def("own_segment_name", [] { return jaccl::World::require().own_segment_name(); });
  m.def("log_info", [](const std::string& line) { jaccl::log(jaccl::LogLevel::kInfo, line); });
  m.def("log_warning", [](const std::string& line) { jaccl::log(jaccl::LogLevel::kWarn, line); });
  m.def("name_site", [](uint32_t site, const std::string& name) { jaccl::name_site(site, name); },
        nb::arg("site"), nb::arg("name"));
  m.def("is_initialized", [] { return jaccl::World::get() != nullptr; });
  m.def("call_counts", &jaccl::call_counts,
        "(calls run at once on XLA's thread, calls handed to a device's call thread)");
  m.def("process_run", &jaccl::process_run, nb::arg("process_of_rank"),
        "ranks per process where they are processes x equal runs of consecutive ranks, else 0 "
        "(comm/layouts.h)");
  m.def("communicator_id",
        [](const std::vector<int64_t>& table, int group_size, int64_t lane) {
          return jaccl::communicator_id(table.data(), table.size(), group_size,
                                        jaccl::Space::kOwnOps, jaccl::lane_of_attribute(lane), 0);
        },
        nb::arg("table"), nb::arg("group_size"), nb::arg("lane"),
        "the id (uint64) of jaccl's communicator of a group table in a lane, which every call "
        "carries (comm/communicator.h)");
  m.def("spans_hosts_evenly", &jaccl::spans_hosts_evenly, nb::arg("host_of_rank"),
        "whether the ranks are on several hosts with the same number (> 1) on each");
  m.def("keep_call_times", &jaccl::keep_call_times, nb::arg("on"),
        "starts (dropping what was kept) or stops keeping the engine's time per collective call "
        "(collectives/call_times.h)");
  m.def("take_call_times", &jaccl::take_call_times,
        "{device id: the engine's seconds for each collective call kept, in call order}, emptied");
  m.def("streams_read_in_place", &jaccl::streams_read_in_place,
        "streams this process read out of a sender's memory (collectives/engine.h)");
  m.def("moe_streams_through_rings", &jaccl::moe_streams_through_rings,
        "MoE combine streams this process received through rings of rows (moe/moe.h)");
  m.def("flush_aborts", [](double seconds) {
    if (jaccl::World* world = jaccl::World::get()) world->flush_aborts(seconds);
  }, nb::arg("seconds"), nb::call_guard<nb::gil_scoped_release>());
  // An uncaught Python exception (jax_jaccl/_uncaught.py): every peer's collectives fail now.
  m.def("raise_abort", [](const std::string& reason) {
    if (jaccl::World* world = jaccl::World::get()) world->raise_abort(reason);
  }, nb::arg("reason"), nb::call_guard<nb::gil_scoped_release>());
  // Why a process of the world on this host died or failed since the world's last call met it
  // (a lost one no call has met yet), or "": jax_jaccl/_bootstrap.py asks before XLA splits
  // MPI_COMM_WORLD in a job that recovers, so that the split never meets it.
  m.def("dead_peer", []() -> std::string {
    jaccl::World* world = jaccl::World::get();
    if (world == nullptr || world->aborted()) return "";
    std::vector<int> all(world->config().processes.size());
    std::iota(all.begin(), all.end(), 0);
    try {
      world->check_health(all);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  });
  m.def("aborted", [] {
    jaccl::World* world = jaccl::World::get();
    return world != nullptr && world->aborted();
  });
  m.def("shutdown", [] {
    jaccl::World::destroy();
    pending_network().reset();
  }, nb::call_guard<nb::gil_scoped_release>());
}
