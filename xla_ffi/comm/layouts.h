// The process layouts two kinds of algorithm need, decided here for both sides: the engine
// (Communicator::Member's process_run and hierarchical) and jaccl's Python side, which refuses
// an explicit algorithm a group's layout does not fit at trace time (_jaccl.process_run and
// _jaccl.spans_hosts_evenly, jax_jaccl/_ops/_common.py).
//
// Contract: process_run() takes each rank's process in rank order and returns the ranks per
// process where the ranks are several processes each holding the same number (> 1) of
// consecutive ranks (all_reduce's cascade), else 0. spans_hosts_evenly() takes each rank's host
// (any labels) and says whether the ranks are on several hosts with the same number (> 1) on
// each (the hierarchical algorithms).
#pragma once

#include <cstdint>
#include <vector>

namespace jaccl {

int process_run(const std::vector<int64_t>& process_of_rank);
bool spans_hosts_evenly(const std::vector<int64_t>& host_of_rank);

}  // namespace jaccl
