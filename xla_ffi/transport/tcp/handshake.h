// How a TCP connection proves it belongs to the job.
//
// The acceptor sends a random 16-byte challenge; the connector answers with a Hello naming
// the link (its process, the two devices, the stripe) and a SipHash-2-4 tag over challenge
// and Hello, keyed with the job secret that every process read from JAX's key-value store.
// The secret never crosses the wire, and a recorded answer is useless against a new
// challenge. The acceptor checks the tag and that it expects the link, and answers one byte.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace jaccl::tcp {

constexpr uint32_t kHelloMagic = 0x4a43484cu;  // "JCHL"
constexpr uint32_t kHelloVersion = 2;  // 2: a control socket per link beside the stripes

struct Challenge {
  uint8_t nonce[16];
};

struct Hello {
  uint32_t magic;
  uint32_t version;
  uint32_t process;     // the connector's process index
  uint32_t stripe;
  int64_t src_device;   // the connector's device
  int64_t dst_device;   // the acceptor's device
  uint64_t tag;         // SipHash(secret, challenge || fields above)
};

using SecretKey = std::array<uint8_t, 16>;

SecretKey key_from_secret(const std::string& secret_hex);
Challenge make_challenge();
uint64_t hello_tag(const SecretKey& key, const Challenge& challenge, const Hello& hello);

}  // namespace jaccl::tcp
