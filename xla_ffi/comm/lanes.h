// Lanes: how several calls of one device are in flight at once.
//
// XLA:CPU runs jaccl calls that do not depend on each other in whatever order they become
// ready, possibly at once, and that order may differ between ranks. Calls of one chain (the
// token that orders a block's collectives: jax_jaccl/_ordering.py) never race, so the
// lowering gives every chain of a module a lane (the first chain lowered lane 0, the next
// lane 1, ..., wrapping at JACCL_LANES) and the calls of a lane meet in order on every rank.
// Each lane of a device is independent of the others:
// - its calls run on the lane's own threads (collectives/device_threads.h) under the lane's
//   own lock (World::device_lock), so a call of lane 1 waiting on its peers never holds up
//   one of lane 0 (small calls of lane 0 may run on XLA's thread, those of other lanes never:
//   handlers/cpu/async_call.h; with JACCL_ASYNC=0 every call blocks XLA's thread, and ranks
//   that reach two lanes' calls in opposite orders may then wait until JACCL_TIMEOUT);
// - its communicators are the table's communicators of that lane (comm/world.h): their own
//   members, sequence numbers and scratch;
// - its frames travel in the lane's streams of every shared channel
//   (transport/shared_channel.h; the lane is FrameHeader::channel_stream), so ranks that take
//   two lanes' calls in different orders each get both results, and a receiver never reads
//   another lane's frame.
// Within one lane a frame of the wrong collective still stops both ranks with "ranks
// disagree" at once. Two chains that share a lane (more chains than lanes) are ordered by
// their ranks' threads only: ranks that take them in different orders get that error.
#pragma once

#include <cstdint>

namespace jaccl {

constexpr int kMaxLanes = 8;

}  // namespace jaccl
