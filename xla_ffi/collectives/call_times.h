// The engine's own time per collective call, kept for jaccl-bench (`--engine-time`): how much
// of a call's time the engine takes, through either door (jaccl's ops and XLA's collectives
// through the mpiabi library both reach run_collective).
//
// Contract: keep_call_times(true) starts keeping (and drops what was kept), false stops.
// While kept, record_call_time(device, seconds) (collectives/run.cc: from the algorithm's
// start to its end, on this rank, so it includes waiting for peers that arrive later) appends
// to the device's list; take_call_times() returns each device's list in call order, devices
// in ascending id, and empties them. Thread-safe; costs one relaxed load per call when off.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace jaccl {

void keep_call_times(bool on);
void record_call_time(int64_t device, double seconds);
std::map<int64_t, std::vector<double>> take_call_times();

}  // namespace jaccl
