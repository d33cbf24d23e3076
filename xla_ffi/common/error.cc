#include "common/error.h"

#include <cerrno>
#include <cstring>

namespace jaccl {

void throw_system_error(const std::string& what) {
  int err = errno;
  throw_error(ErrorKind::kInternal, what, ": ", std::strerror(err));
}

}  // namespace jaccl
