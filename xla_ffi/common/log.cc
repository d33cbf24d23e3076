#include "common/log.h"

#include <strings.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <unordered_set>

#include "common/error.h"

namespace jaccl {

namespace {

std::atomic<LogLevel> current_level{LogLevel::kWarn};

}  // namespace

LogLevel log_level() { return current_level.load(std::memory_order_relaxed); }

void set_log_level(LogLevel level) { current_level.store(level, std::memory_order_relaxed); }

LogLevel parse_log_level(const std::string& name) {
  static const char* const kNames[] = {"none", "warn", "info", "trace"};
  for (int i = 0; i < 4; ++i) {
    if (strcasecmp(name.c_str(), kNames[i]) == 0) return static_cast<LogLevel>(i);
  }
  throw_error(ErrorKind::kInvalidArgument, "JACCL_DEBUG must be none, warn, info or trace, not '",
              name, "'");
}

void log_line(LogLevel level, const std::string& line) {
  static const char* const kNames[] = {"", "WARN", "INFO", "TRACE"};
  std::fprintf(stderr, "jaccl %d %s %s\n", static_cast<int>(getpid()),
               kNames[static_cast<int>(level)], line.c_str());
  std::fflush(stderr);
}

bool first_time(const std::string& key) {
  static std::mutex mutex;
  static std::unordered_set<std::string> seen;
  std::lock_guard<std::mutex> lock(mutex);
  return seen.insert(key).second;
}

}  // namespace jaccl
