// Text for log lines and error messages, built without iostreams.
//
// Contract: text(parts...) returns the parts written one after another; append(out, parts...)
// adds them to `out`. A part is a string (std::string, std::string_view, a C string; a null
// char* writes "(null)"), a char, a bool (1 or 0), an integer of any width (decimal), a
// floating-point number (printf's %g: 6 significant digits, as std::ostream writes it), a
// pointer (0x... hexadecimal) or hex(n) (lower-case hexadecimal, no prefix). Anything else
// fails to compile. No locale is read and no stream object is made.
//
// Why: the extensions are loaded into other people's processes. A module linked with
// -static-libstdc++ (the GPU machine's default compiler does this, with -Bsymbolic) carries its
// own copy of libstdc++'s stream and locale code, but the facet ids of that code are
// STB_GNU_UNIQUE symbols, which the dynamic linker binds process-wide to the copy loaded first
// (JAX's libstdc++): the module's locale then hands out the wrong facets, and every
// `std::ostream << number` in it wrote nothing or crashed. std::to_chars and snprintf use no
// locale, so the same text comes out whatever built or loaded the module.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>

namespace jaccl {

// A number to write in hexadecimal: text("communicator ", hex(id)).
struct Hex {
  uint64_t value;
};
inline Hex hex(uint64_t value) { return Hex{value}; }

namespace text_detail {

template <typename T>
inline constexpr bool kUnsupported = false;

inline void append_unsigned(std::string& out, uint64_t value, int base) {
  char buffer[24];
  auto end = std::to_chars(buffer, buffer + sizeof(buffer), value, base).ptr;
  out.append(buffer, end);
}

inline void append_signed(std::string& out, int64_t value) {
  char buffer[24];
  auto end = std::to_chars(buffer, buffer + sizeof(buffer), value).ptr;
  out.append(buffer, end);
}

inline void append_double(std::string& out, double value) {
  char buffer[32];
  int n = std::snprintf(buffer, sizeof(buffer), "%g", value);
  if (n > 0) out.append(buffer, static_cast<size_t>(n) < sizeof(buffer) ? n : sizeof(buffer) - 1);
}

template <typename T>
void append_one(std::string& out, const T& part) {
  using D = std::decay_t<T>;
  if constexpr (std::is_same_v<D, Hex>) {
    append_unsigned(out, part.value, 16);
  } else if constexpr (std::is_same_v<D, bool>) {
    out += part ? '1' : '0';
  } else if constexpr (std::is_same_v<D, char>) {
    out += part;
  } else if constexpr (std::is_integral_v<D> && std::is_signed_v<D>) {
    append_signed(out, static_cast<int64_t>(part));
  } else if constexpr (std::is_integral_v<D>) {
    append_unsigned(out, static_cast<uint64_t>(part), 10);
  } else if constexpr (std::is_floating_point_v<D>) {
    append_double(out, static_cast<double>(part));
  } else if constexpr (std::is_array_v<T>) {  // a string literal or a char buffer
    out.append(part);
  } else if constexpr (std::is_same_v<D, char*> || std::is_same_v<D, const char*>) {
    out.append(part != nullptr ? part : "(null)");
  } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    out.append(std::string_view(part));
  } else if constexpr (std::is_pointer_v<D>) {
    out += "0x";
    append_unsigned(out, reinterpret_cast<uintptr_t>(part), 16);
  } else {
    static_assert(kUnsupported<T>, "text(): no way to write this type; convert it first");
  }
}

}  // namespace text_detail

template <typename... Parts>
void append(std::string& out, const Parts&... parts) {
  (text_detail::append_one(out, parts), ...);
}

template <typename... Parts>
std::string text(const Parts&... parts) {
  std::string out;
  append(out, parts...);
  return out;
}

}  // namespace jaccl
