// A failure as a value, for engine code that returns instead of throwing (the CUDA engine,
// whose callers are enqueueing on a stream and must go on to tell the peers).
//
// Contract: a Status is Ok() or a Failure(kind, message); the handlers turn it into XLA's
// error (handlers/ffi_status.h). Messages start with "jaccl:", as jaccl::Error's do.
#pragma once

#include <string>
#include <utility>

#include "common/error.h"

namespace jaccl {

class Status {
 public:
  static Status Ok() { return Status(); }
  static Status Failure(ErrorKind kind, std::string message) {
    Status s;
    s.failed_ = true;
    s.kind_ = kind;
    s.message_ = std::move(message);
    return s;
  }

  bool success() const { return !failed_; }
  bool failure() const { return failed_; }
  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }

 private:
  bool failed_ = false;
  ErrorKind kind_ = ErrorKind::kInternal;
  std::string message_;
};

}  // namespace jaccl
