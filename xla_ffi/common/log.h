// Logging at JACCL_DEBUG's level, in the manner of NCCL_DEBUG.
//
// Contract: WARN (default) prints warnings only; INFO adds one line per decision
// worth knowing (transport, algorithm); TRACE adds per-call lines. The level is
// set by the host (jax_jaccl/_settings.py, through configure()); the engine
// never reads the environment. parse_log_level() throws for an unknown name.
// first_time() lets a caller log a line once per key for the life of the process.
// Thread-safe; lines go to stderr with a "jaccl <pid>" prefix. Parts are text.h's.
#pragma once

#include <cstddef>

#include <string>

#include "common/text.h"

namespace jaccl {

enum class LogLevel { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);
LogLevel parse_log_level(const std::string& name);  // none, warn, info, trace (any case)
void log_line(LogLevel level, const std::string& line);
// Returns true the first time it sees `key` (so the caller logs once).
bool first_time(const std::string& key);

// The size class INFO lines are logged once per: the smallest k with 2^k >= bytes.
inline int size_class(size_t bytes) {
  int k = 0;
  while ((size_t{1} << k) < bytes) ++k;
  return k;
}

template <typename... Parts>
void log(LogLevel level, const Parts&... parts) {
  if (log_level() < level) return;
  log_line(level, text(parts...));
}

}  // namespace jaccl
