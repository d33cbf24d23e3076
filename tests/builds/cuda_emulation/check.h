// Helpers of the emulated-GPU checks: deterministic data, one host thread per emulated GPU,
// and failure counting.
//
// Contract: CHECK records a failure (with its message) and goes on; failures() is the total.
// run_ranks(n, fn) runs fn(rank) on n threads at once, thread r with emulated GPU r current,
// and returns when all returned.
// fill(dtype, data, count, seed) writes the same values for the same arguments, every
// float dtype including a few NaN, infinities and negative zeros.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace jaccl::emulated {

int failures();
void record_failure(const std::string& what);

#define CHECK(cond, what)                                    \
  do {                                                       \
    if (!(cond)) ::jaccl::emulated::record_failure(what);    \
  } while (0)

uint64_t mix(uint64_t x);  // splitmix64 finaliser
void fill(Dtype dtype, void* data, size_t count, uint64_t seed);
void run_ranks(int n, const std::function<void(int)>& fn);
std::string describe(const char* what, int n, Dtype dtype, size_t count, const std::string& extra = "");

// Check groups (one file each).
void check_kernels();
void check_collectives();
void check_moe();
void check_failures();

}  // namespace jaccl::emulated
