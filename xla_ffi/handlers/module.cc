// The Python extension _jaccl: FFI handler capsules and the world's
// life cycle, as called by jax_jaccl/bootstrap.py.
//
// Contract: registrations() may be called at import; init_world() once per
// process, then attach_peers() and unlink_own_segment() at the bootstrap's
// synchronisation points; shutdown() releases everything (also at exit).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <tuple>
#include <vector>

#include "comm/world.h"
#include "common/error.h"
#include "handlers/cpu_handlers.h"

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
  return d;
}

void init_world(int my_process, const std::vector<std::tuple<int, int, std::string>>& processes,
                const std::vector<std::tuple<int64_t, int>>& devices, const std::string& job_tag,
                size_t payload_bytes, int num_slots, double timeout_s, int spin_us) {
  jaccl::WorldConfig config;
  config.my_process = my_process;
  for (const auto& [index, pid, host] : processes) {
    config.processes.push_back(jaccl::ProcessInfo{index, pid, host});
  }
  for (const auto& [id, process] : devices) config.devices.push_back(jaccl::DeviceInfo{id, process});
  config.job_tag = job_tag;
  config.payload_bytes = payload_bytes;
  config.num_slots = num_slots;
  config.timeout_s = timeout_s;
  config.spin_us = spin_us;
  jaccl::World::create(config);
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
  m.def("init_world", &init_world, nb::arg("my_process"), nb::arg("processes"),
        nb::arg("devices"), nb::arg("job_tag"), nb::arg("payload_bytes"), nb::arg("num_slots"),
        nb::arg("timeout_s"), nb::arg("spin_us"));
  m.def("attach_peers", [] { jaccl::World::require().attach_peers(); },
        nb::call_guard<nb::gil_scoped_release>());
  m.def("unlink_own_segment", [] { jaccl::World::require().unlink_own_segment(); });
  m.def("own_segment_name", [] { return jaccl::World::require().own_segment_name(); });
  m.def("is_initialized", [] { return jaccl::World::get() != nullptr; });
  m.def("aborted", [] {
    jaccl::World* world = jaccl::World::get();
    return world != nullptr && world->aborted();
  });
  m.def("shutdown", [] { jaccl::World::destroy(); }, nb::call_guard<nb::gil_scoped_release>());
}
