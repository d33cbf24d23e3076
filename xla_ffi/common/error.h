// The engine's single error type.
//
// Contract: everything below handlers/ reports failure by throwing jaccl::Error (or, where
// it must return instead, a common/status.h Status); handlers turn either into an XLA FFI
// error. Nothing aborts the
// process. Messages start with "jaccl:" and name the ranks involved.
#pragma once

#include <stdexcept>
#include <string>

#include "common/text.h"

namespace jaccl {

enum class ErrorKind {
  kInvalidArgument,  // the caller passed something unusable
  kMismatch,         // ranks disagree about the collective they are in
  kTimeout,          // a peer did not make progress within the deadline
  kPeerFailure,      // a peer died or aborted
  kFailedPrecondition,  // the process is not set up for the call (e.g. a device not registered)
  kInternal,         // a system call or an invariant failed
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Builds a message from text.h's parts: throw_error(kTimeout, "waited ", s, " s").
template <typename... Parts>
[[noreturn]] void throw_error(ErrorKind kind, const Parts&... parts) {
  throw Error(kind, text("jaccl: ", parts...));
}

// Throws kInternal with strerror(errno) appended.
[[noreturn]] void throw_system_error(const std::string& what);

}  // namespace jaccl

#define JACCL_CHECK(cond, ...)                                          \
  do {                                                                  \
    if (!(cond)) ::jaccl::throw_error(::jaccl::ErrorKind::kInternal,    \
                                      "check failed: " #cond ": ", __VA_ARGS__); \
  } while (0)
