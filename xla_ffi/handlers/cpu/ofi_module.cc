#include "handlers/cpu/ofi_module.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <tuple>
#include <vector>

#include "comm/world.h"
#include "transport/ofi/ofi.h"

namespace nb = nanobind;

namespace {

// (found, provider, fabric, domain, hardware, why)
using Answer = std::tuple<bool, std::string, std::string, std::string, bool, std::string>;

Answer choose(const std::string& provider) {
  std::string why;
  auto choice = jaccl::ofi::choose(provider, &why);
  if (!choice) return {false, "", "", "", false, why};
  return {true, choice->provider, choice->fabric, choice->domain, choice->hardware, ""};
}

nb::list providers() {
  nb::list out;
  for (const auto& e : jaccl::ofi::list_providers()) {
    nb::dict d;
    d["provider"] = e.provider;
    d["fabric"] = e.fabric;
    d["domain"] = e.domain;
    d["hardware"] = e.hardware;
    d["rma"] = e.rma;
    d["cq_data_size"] = e.cq_data_size;
    d["progress"] = e.progress;
    out.append(d);
  }
  return out;
}

}  // namespace

void define_ofi_functions(nb::module_& m) {
  m.attr("ofi_built") = jaccl::ofi::built();
  m.def("ofi_version", &jaccl::ofi::library_version);
  m.def("ofi_choose", &choose, nb::arg("provider") = "");
  m.def("ofi_providers", &providers);
  m.def("ofi_local_info", [] { return jaccl::World::require().ofi_local_info(); });
  m.def("ofi_add_peers", [](const std::vector<std::tuple<int, std::string>>& peers) {
    jaccl::World& world = jaccl::World::require();
    for (const auto& [process, info] : peers) world.ofi_add_peer(process, info);
  }, nb::arg("peers"));
}
