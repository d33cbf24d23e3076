// transport/ofi/ofi.h in a build without libfabric (CMake compiles this file instead of
// fabric.cc and ofi_transport.cc): no providers, nothing chosen, the reason in every answer.
#include "common/error.h"
#include "transport/ofi/ofi.h"

namespace jaccl::ofi {
namespace {

const char kWhy[] = "jax_jaccl was built without libfabric (install libfabric-dev and rebuild, "
                    "JACCL_OFI=ON to insist)";

}  // namespace

bool built() { return false; }

std::string library_version() { return ""; }

std::vector<ProviderEntry> list_providers() { return {}; }

std::optional<Choice> choose(const std::string&, std::string* why) {
  *why = kWhy;
  return std::nullopt;
}

std::unique_ptr<DataNetwork> open(const Choice&, const std::string&, const Settings&,
                                  const std::vector<LinkSpec>&) {
  throw_error(ErrorKind::kInvalidArgument, "JACCL_TRANSPORT=ofi: ", kWhy);
}

}  // namespace jaccl::ofi
