#include "common/process.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/text.h"

namespace jaccl {

bool pid_alive(int pid) {
  if (pid <= 0) return true;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // /proc/<pid>/stat reads "pid (comm) S ...": the state letter follows the last ')'.
  const std::string path = text("/proc/", pid, "/stat");
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char line[512];
  ssize_t n;
  do {
    n = read(fd, line, sizeof(line) - 1);
  } while (n < 0 && errno == EINTR);
  close(fd);
  if (n <= 0) return false;
  line[n] = '\0';
  const char* close_paren = std::strrchr(line, ')');
  if (close_paren == nullptr || close_paren + 2 >= line + n) return true;
  const char state = close_paren[2];
  return state != 'Z' && state != 'X';
}

}  // namespace jaccl
