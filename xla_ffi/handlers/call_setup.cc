#include "handlers/call_setup.h"

#include <string>

namespace ffi = xla::ffi;

namespace jaccl {

ffi::Error unsupported_type(CollectiveKind kind, ffi::DataType type) {
  return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                    std::string("jaccl: ") + kind_name(kind) + " does not move element type " +
                        std::to_string(static_cast<int>(type)));
}

}  // namespace jaccl
