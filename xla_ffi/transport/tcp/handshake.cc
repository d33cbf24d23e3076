#include "transport/tcp/handshake.h"

#include <cstring>
#include <random>

#include "common/error.h"

namespace jaccl::tcp {
namespace {

uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

// SipHash-2-4 (Aumasson & Bernstein), written from the published description.
uint64_t siphash24(const uint8_t key[16], const uint8_t* data, size_t len) {
  uint64_t k0, k1;
  std::memcpy(&k0, key, 8);
  std::memcpy(&k1, key + 8, 8);
  uint64_t v0 = 0x736f6d6570736575ull ^ k0, v1 = 0x646f72616e646f6dull ^ k1;
  uint64_t v2 = 0x6c7967656e657261ull ^ k0, v3 = 0x7465646279746573ull ^ k1;
  auto round = [&] {
    v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
    v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
    v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
    v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
  };
  size_t full = len - len % 8;
  for (size_t i = 0; i < full; i += 8) {
    uint64_t m;
    std::memcpy(&m, data + i, 8);
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
  uint64_t last = static_cast<uint64_t>(len) << 56;
  for (size_t i = 0; i < len % 8; ++i) last |= static_cast<uint64_t>(data[full + i]) << (8 * i);
  v3 ^= last;
  round();
  round();
  v0 ^= last;
  v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) round();
  return v0 ^ v1 ^ v2 ^ v3;
}

}  // namespace

SecretKey key_from_secret(const std::string& secret_hex) {
  if (secret_hex.size() < 32) throw_error(ErrorKind::kInvalidArgument, "job secret too short");
  SecretKey key{};
  for (size_t i = 0; i < key.size(); ++i) {
    key[i] = static_cast<uint8_t>(std::stoi(secret_hex.substr(2 * i, 2), nullptr, 16));
  }
  return key;
}

Challenge make_challenge() {
  std::random_device random;
  Challenge c;
  for (size_t i = 0; i < sizeof c.nonce; i += 4) {
    uint32_t r = random();
    std::memcpy(c.nonce + i, &r, 4);
  }
  return c;
}

uint64_t hello_tag(const SecretKey& key, const Challenge& challenge, const Hello& hello) {
  uint8_t message[sizeof challenge.nonce + offsetof(Hello, tag)];
  std::memcpy(message, challenge.nonce, sizeof challenge.nonce);
  std::memcpy(message + sizeof challenge.nonce, &hello, offsetof(Hello, tag));
  return siphash24(key.data(), message, sizeof message);
}

}  // namespace jaccl::tcp
