// Single-copy reads between processes of one host: a receiver copies a sender's
// bytes straight out of the sender's memory (Linux cross-memory attach,
// process_vm_readv), one copy where frames through shared memory take two (into
// the ring and out of it).
//
// Contract: can_read_process() tells whether this process can read `pid`'s memory: it
// reads 8 bytes at `address` there and compares them with `expected`, the value
// the owner keeps at that address as this process sees it through shared memory;
// so a kernel or sandbox that forbids the call (Yama's ptrace scope, seccomp,
// another user) and a pid that names another process here (another pid
// namespace) answer false, never a read of the wrong process. read_from_process() copies
// `bytes` from `address` in process `pid` into the local runs `to` (whose lengths
// add up to `bytes`); a pid of this process copies with memcpy. It throws
// kPeerFailure when the process is gone and kInternal on any other failure,
// naming `peer`.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace jaccl {

bool can_read_process(pid_t pid, uint64_t address, uint64_t expected);

void read_from_process(pid_t pid, uint64_t address, size_t bytes, const std::vector<iovec>& to,
                       const std::string& peer);

}  // namespace jaccl
