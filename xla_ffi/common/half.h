// float16 / bfloat16 storage types and their conversions to and from float.
//
// Contract: conversions to float are exact; conversions from float round to
// nearest even and keep NaN a NaN, as XLA does.
#pragma once

#include <cstdint>
#include <cstring>

namespace jaccl {

struct bf16_t { uint16_t bits; };
struct f16_t { uint16_t bits; };

inline float to_float(bf16_t h) {
  uint32_t u = static_cast<uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline bf16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_t{static_cast<uint16_t>((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16_t{static_cast<uint16_t>(u >> 16)};
}

inline float to_float(f16_t h) {
  uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  uint32_t exponent = (h.bits >> 10) & 0x1fu;
  uint32_t mantissa = h.bits & 0x3ffu;
  uint32_t u;
  if (exponent == 0x1f) {
    u = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    u = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    u = sign;
  } else {  // subnormal: value = mantissa * 2^-24
    float f = static_cast<float>(mantissa) * 5.9604644775390625e-08f;
    return sign ? -f : f;
  }
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline f16_t to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return f16_t{static_cast<uint16_t>(sign | 0x7e00u)};  // NaN
  if (abs >= 0x477ff000u) return f16_t{static_cast<uint16_t>(sign | 0x7c00u)};  // overflow -> inf
  if (abs < 0x38800000u) {  // result is subnormal or zero: round abs * 2^24 to an integer
    float a;
    std::memcpy(&a, &abs, sizeof a);
    float scaled = a * 16777216.0f;
    // round half to even
    uint32_t q = static_cast<uint32_t>(scaled);
    float rest = scaled - static_cast<float>(q);
    if (rest > 0.5f || (rest == 0.5f && (q & 1u))) ++q;
    return f16_t{static_cast<uint16_t>(sign | q)};
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  uint32_t exponent = (rounded >> 23) - 112;
  uint32_t mantissa = (rounded >> 13) & 0x3ffu;
  return f16_t{static_cast<uint16_t>(sign | (exponent << 10) | mantissa)};
}

}  // namespace jaccl
