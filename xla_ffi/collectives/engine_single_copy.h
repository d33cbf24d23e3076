// The engine's single-copy protocol (engine.h, "Single copy"): which streams go as an address,
// the one frame that carries it, the reads of the memory it names, and the acknowledgements
// after a call's last phase. engine.cc's loop calls these where a task takes part; reading
// another process's memory itself is transport/shm/single_copy.h.
//
// Contract: lends() and may_take_address() decide from the call and the task alone (`alone`:
// the stream is the only one on its channel in the phase); lend() fills the address frame's
// payload, accept_address() checks a received one against the task (throwing kMismatch, or
// kInternal for an operand offered from another process to a fold); read_lent() copies the
// lent elements [a, a + n) into the task's one local sink (`reading`: the task's, by source,
// whether it came as an address); check_lenders_alive() throws when a
// lender's process failed (its memory may hold other bytes since). Every read of memory lent
// by a device of this process happens inside a LocalRead.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/engine.h"
#include "transport/frame.h"

namespace jaccl {

// The process of the call's group's rank `rank` (the call has a World).
int process_of(const Call& call, int rank);

// Brackets one step's reads of memory that another device of this process lent in place. None
// starts once this process raised its abort board: the lender's call may have failed and XLA
// freed its buffers. A failing call raises the board, then waits for the reads in flight
// (await_local_reads), so none outlives the memory (the counter's increment and the board's
// raise are each followed by a full fence before the other's load).
class LocalRead {
 public:
  explicit LocalRead(const World& world);
  ~LocalRead();
  LocalRead(const LocalRead&) = delete;
  LocalRead& operator=(const LocalRead&) = delete;
};

// Streams whose bytes went as an address, to acknowledge after the last phase: `owed` the
// ranks whose memory this rank read, `awaited` those that read its own.
struct Acks {
  std::vector<int> owed, awaited;
};

// A task of one contiguous local source and one stream sink sends the stream as an address:
// the setting allows it, the receiver's process can read this one's, and in a reducing kind
// the receiver is a device of this process (a fold reads its operand where it lies).
bool lends(const Call& call, const Task& t, bool alone);
// Source k of a receiving task may come as an address: a copy (one source, one local sink)
// reads the sender's memory wherever its process may; a fold, only from a device of its own.
bool may_take_address(const Call& call, const Task& t, size_t k, bool alone);

AddressPayload lend(const Call& call, const Task& t);
// Checks the address offered for source k (its frame's header already checked) and counts it
// in streams_read_in_place().
void accept_address(const Call& call, const Task& t, size_t k, const AddressPayload& from);
void read_lent(const Call& call, const Task& t, const AddressPayload& from, size_t a, size_t n,
               const std::vector<char>& reading, std::vector<iovec>& runs);
// `reading`: by source, whether it came as an address.
void check_lenders_alive(const Call& call, const Task& t, const std::vector<char>& reading);

// The phase after the last one: one element (of zeros) from each reader to the sender it read,
// which may then let its memory change; `received` holds what the awaited ones send.
Phase acknowledgements(const Call& call, const Acks& acks, std::vector<unsigned char>& received);

}  // namespace jaccl
