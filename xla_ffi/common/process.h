// Whether another process of this host still lives.
//
// Contract: pid_alive(pid) is false once the process is gone or a zombie (killed but not yet
// reaped); true for pid <= 0 (unknown) and while the process runs. Cheap: one kill(2) and one
// read of /proc/<pid>/stat.
#pragma once

namespace jaccl {

bool pid_alive(int pid);

}  // namespace jaccl
