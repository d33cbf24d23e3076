// The unit every transport carries: a 64-byte header followed by a payload.
//
// Every frame says which collective it belongs to (communicator, sequence
// number, call site, kind, element type, reduce op, algorithm, the sender's
// element count), where its payload sits in its stream (tag, stream length,
// offset) and which stream of a shared channel carries it. A receiver compares each
// header with what it expects, so ranks that disagree get an error naming both
// sides instead of wrong data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace jaccl {

constexpr uint32_t kFrameMagic = 0x4a43434cu;  // "JCCL"

// FrameHeader::flags: the payload is an AddressPayload, where the receiver reads the
// stream's bytes in the sender's memory (collectives/engine.h, "Single copy").
constexpr uint32_t kFrameAddress = 1u;

struct AddressPayload {
  uint64_t address;  // of the stream's first byte, in the sender's process
  uint64_t bytes;
  int32_t pid;       // the sender's
  uint32_t unused;
};

struct FrameHeader {
  uint32_t magic;
  uint32_t comm;          // low 32 bits of the communicator id
  uint32_t seq;           // collective number on this communicator, per device
  uint8_t kind;           // CollectiveKind
  uint8_t dtype;          // element type of the collective (Dtype)
  uint8_t redop;          // ReduceOp
  uint8_t algorithm;      // Algorithm
  uint32_t src_rank;      // sender's rank in the group
  uint32_t tag;           // which stream of the collective this frame belongs to
  uint64_t op_count;      // elements in the sender's input
  uint64_t stream_count;  // elements in this stream
  uint64_t offset;        // element offset of this payload in the stream
  uint32_t nbytes;        // payload bytes
  uint32_t site;          // where the collective was written (common/call_sites.h; 0: none)
  uint32_t channel_stream;  // the sender's (Communicator::channel_stream()): which stream of
                            // a shared channel (transport/shared_channel.h) it is in
  uint32_t flags;         // kFrameAddress, or 0
};
static_assert(sizeof(FrameHeader) == 64, "frame header must stay 64 bytes");

// A slot of a transport: header, then the payload (64-byte aligned).
struct Frame {
  FrameHeader header;
  unsigned char* payload() { return reinterpret_cast<unsigned char*>(this) + sizeof(FrameHeader); }
  const unsigned char* payload() const {
    return reinterpret_cast<const unsigned char*>(this) + sizeof(FrameHeader);
  }
};

}  // namespace jaccl
