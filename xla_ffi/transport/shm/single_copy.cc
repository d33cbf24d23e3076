#include "transport/shm/single_copy.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace jaccl {

bool can_read_process(pid_t pid, uint64_t address, uint64_t expected) {
  uint64_t seen = ~expected;
  iovec local{&seen, sizeof seen};
  iovec remote{reinterpret_cast<void*>(address), sizeof seen};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(sizeof seen) &&
         seen == expected;
}

// The local runs are taken up to IOV_MAX at a time; each call reads the remote
// bytes that fill them, and a short read (the kernel may stop at any page)
// resumes where it stopped.
void read_from_process(pid_t pid, uint64_t address, size_t bytes, const std::vector<iovec>& to,
                       const std::string& peer) {
  size_t copied = 0;
  if (pid == getpid()) {
    for (const iovec& v : to) {
      std::memcpy(v.iov_base, reinterpret_cast<const char*>(address) + copied, v.iov_len);
      copied += v.iov_len;
    }
    JACCL_CHECK(copied == bytes, "single-copy runs do not add up");
    return;
  }
  constexpr size_t kMaxRuns = 1024;
  size_t run = 0, within = 0;  // the next local byte: run `run`, `within` bytes into it
  iovec local[kMaxRuns];
  while (copied < bytes) {
    size_t n = 0, batch = 0;
    for (size_t i = run, skip = within; i < to.size() && n < kMaxRuns; ++i, skip = 0) {
      local[n].iov_base = static_cast<char*>(to[i].iov_base) + skip;
      local[n].iov_len = to[i].iov_len - skip;
      batch += local[n].iov_len;
      ++n;
    }
    JACCL_CHECK(n > 0 && copied + batch <= bytes, "single-copy runs do not add up");
    iovec remote{reinterpret_cast<void*>(address + copied), batch};
    const ssize_t got = process_vm_readv(pid, local, n, &remote, 1, 0);
    if (got <= 0) {
      const int err = got == 0 ? EFAULT : errno;
      if (err == EINTR) continue;
      if (err == ESRCH) throw_error(ErrorKind::kPeerFailure, peer, " died");
      throw_error(ErrorKind::kInternal, "reading ", bytes, " bytes from ", peer,
                  " in place failed: ", std::strerror(err),
                  " (JACCL_SINGLE_COPY_MIN_KB=0 moves them through shared memory instead)");
    }
    copied += static_cast<size_t>(got);
    for (size_t left = static_cast<size_t>(got); left > 0;) {  // advance the local cursor
      const size_t take = std::min(left, to[run].iov_len - within);
      left -= take;
      within += take;
      if (within == to[run].iov_len) {
        ++run;
        within = 0;
      }
    }
  }
}

}  // namespace jaccl
