// The C interface one extension module uses to run the CPU engine of another: the CUDA
// handlers (_jaccl_cuda) stage device buffers through pinned host memory and hand them to
// the engine that _jaccl owns (one World per process, whichever module calls it).
//
// Contract: jaccl_run_host_call runs one collective for one device on host buffers, as the
// CPU FFI handler would; returns 0, or non-zero with a message in `error` (also posted on the
// abort board, so the peers stop too). Thread-safe in the engine's usual sense: one caller
// per device at a time.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

struct JacclHostCall {
  int32_t kind;           // CollectiveKind
  int64_t device;         // global device id
  const int64_t* groups;  // group table, as the FFI attribute
  size_t groups_len;
  int64_t group_size;
  int32_t dtype;          // Dtype
  int32_t op;             // ReduceOp
  int32_t algorithm;      // Algorithm
  const void* in;
  void* out;
  uint64_t in_count, out_count, outer_in, outer_out;
};

typedef int (*JacclRunHostCall)(const JacclHostCall* call, char* error, size_t error_len);

int jaccl_run_host_call(const JacclHostCall* call, char* error, size_t error_len);
}
