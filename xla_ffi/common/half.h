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

// The float16 conversions are integer arithmetic and selects, without branches, so that the
// loops that call them vectorise (widened and rounded at every step of a float16 fold, they
// were that fold's whole cost); tests/builds/native/half_checks.cc checks them on every
// input.
inline float to_float(f16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu;
  const uint32_t mantissa = h.bits & 0x3ffu;
  const uint32_t normal = sign | ((exponent + 112) << 23) | (mantissa << 13);
  const uint32_t special = sign | 0x7f800000u | (mantissa << 13);  // inf, NaN
  // A subnormal's value is mantissa * 2^-24, exact in float (zero included).
  const float small = static_cast<float>(static_cast<int32_t>(mantissa)) * 5.9604644775390625e-08f;
  uint32_t small_bits;
  std::memcpy(&small_bits, &small, sizeof small_bits);
  const uint32_t u = exponent == 0x1f ? special : exponent != 0 ? normal : (sign | small_bits);
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline f16_t to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  // Normal results: round the mantissa's low 13 bits to nearest even; a carry moves into the
  // exponent, which is rebased from float's bias (127) to float16's (15).
  const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  const uint32_t normal = (rounded >> 13) - (112u << 10);
  // Subnormal results and zero: the value times 2^24 rounded to nearest even, from the
  // significand (implicit bit included) shifted right by 126 - exponent (at least 14 where
  // this result is taken; past 31 everything is shifted out, and float's own subnormals give
  // 0). Computed for every input, so the shift is kept within 14..31 for all of them.
  const uint32_t exponent = abs >> 23;
  const uint32_t significand = (abs & 0x7fffffu) | (exponent != 0 ? 0x800000u : 0u);
  const uint32_t shift_wanted = 126u - (exponent != 0 ? exponent : 1u);
  const uint32_t at_most_31 = shift_wanted < 31u ? shift_wanted : 31u;
  const uint32_t shift = at_most_31 > 14u ? at_most_31 : 14u;  // min and max: they vectorise
  const uint32_t whole = significand >> shift;
  const uint32_t rest = significand & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  const uint32_t small = whole + (rest > half || (rest == half && (whole & 1u)) ? 1u : 0u);
  const uint32_t bits = abs > 0x7f800000u    ? 0x7e00u   // NaN
                        : abs >= 0x477ff000u ? 0x7c00u   // overflow -> inf
                        : abs < 0x38800000u  ? small
                                             : normal;
  return f16_t{static_cast<uint16_t>(sign | bits)};
}

}  // namespace jaccl
