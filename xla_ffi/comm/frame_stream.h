// Frames streamed one way between two devices over whatever channel joins them, with no
// collective around them: what `jaccl-bench transport` measures (a transport's ceiling).
//
// Contract: the process holding `src` calls send_frames(), the one holding `dst`
// receive_frames(), with the same count and payload (<= the frame payload). Each frame's
// header carries its number and length; the receiver checks both, so a transport that
// reorders, drops or truncates fails loudly. receive_frames() returns the seconds from the
// first frame's arrival to the last one's release (count - 1 frames of payload moved in that
// time); send_frames() returns once every frame is committed. Both throw on a channel failure
// or at the deadline.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/clock.h"

namespace jaccl {

class World;

void send_frames(World& world, int64_t src, int64_t dst, size_t payload, int count,
                 const Deadline& deadline);
double receive_frames(World& world, int64_t src, int64_t dst, size_t payload, int count,
                      const Deadline& deadline);

}  // namespace jaccl
