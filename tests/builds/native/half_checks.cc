// Checks common/half.h's float16 conversions on every input against the CPU's own conversion
// instructions (F16C: round to nearest even, subnormals kept). jaccl's differ from the
// instructions in two documented ways: float -> float16 makes a NaN the quiet NaN of its sign
// without payload, and float16 -> float is exact for signalling NaNs too (the instruction
// quiets them). Prints "ok" and exits 0, or prints the first mismatches and exits 1; exits 2
// where the CPU has no AVX2 and F16C (the caller skips).
#include <immintrin.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/half.h"

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

int bad = 0;

void report(const char* what, uint32_t in, uint32_t got, uint32_t want) {
  if (bad++ < 20) std::printf("%s(%#010x) = %#010x, want %#010x\n", what, in, got, want);
}

// Every float16 value widened.
__attribute__((target("avx2,f16c"))) void check_to_float() {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    uint32_t want = bits_of(_cvtsh_ss(static_cast<uint16_t>(h)));
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0) want &= ~0x00400000u | (h & 0x200u) << 13;
    const uint32_t got = bits_of(jaccl::to_float(jaccl::f16_t{static_cast<uint16_t>(h)}));
    if (got != want) report("to_float", h, got, want);
  }
}

// The floats whose bits start at `first`, kBlock of them, rounded to float16 (the loop over
// to_f16 compiled for AVX2, as the reduction loops' clones are).
constexpr uint32_t kBlock = 1u << 16;

__attribute__((target("avx2,f16c"))) void check_to_f16(uint32_t first) {
  alignas(32) float in[kBlock];
  alignas(32) uint16_t got[kBlock];
  alignas(32) uint16_t want[kBlock];
  for (uint32_t i = 0; i < kBlock; ++i) {
    const uint32_t u = first + i;
    std::memcpy(&in[i], &u, sizeof u);
  }
  for (uint32_t i = 0; i < kBlock; ++i) got[i] = jaccl::to_f16(in[i]).bits;
  for (uint32_t i = 0; i < kBlock; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_load_ps(&in[i]), _MM_FROUND_TO_NEAREST_INT);
    _mm_store_si128(reinterpret_cast<__m128i*>(&want[i]), h);
  }
  for (uint32_t i = 0; i < kBlock; ++i) {
    const uint32_t u = first + i;
    const uint16_t nan = static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7e00u);
    want[i] = (u & 0x7fffffffu) > 0x7f800000u ? nan : want[i];
  }
  if (std::memcmp(got, want, sizeof got) == 0) return;
  for (uint32_t i = 0; i < kBlock; ++i) {
    if (got[i] != want[i]) report("to_f16", first + i, got[i], want[i]);
  }
}

}  // namespace

// argv[1], if given (a power of two): check every Nth block of 65536 floats only (every
// exponent meets several blocks: the quick run under UBSan).
int main(int argc, char** argv) {
  const uint32_t step = argc > 1 ? static_cast<uint32_t>(std::atoi(argv[1])) : 1u;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("f16c")) {
    std::puts("no avx2 and f16c");
    return 2;
  }
  check_to_float();
  uint32_t first = 0;
  do {
    check_to_f16(first);
    first += kBlock * step;
  } while (first != 0);
  if (bad) {
    std::printf("%d mismatches\n", bad);
    return 1;
  }
  std::puts("ok");
  return 0;
}
