// Request identities: Fingerprint (SHA-256 from OpenSSL's libcrypto) and NewRequestId (UUIDv7).

#include <openssl/evp.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "idem/options.h"
#include "util/coding.h"
#include "util/hex.h"
#include "util/random.h"

namespace idem {
std::string Fingerprint(std::string_view payload) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int size = 0;
  // EVP_Digest is one-shot and thread-safe; SHA-256 never fails on valid input.
  EVP_Digest(payload.data(), payload.size(), digest.data(), &size, EVP_sha256(), nullptr);
  return util::ToHex(std::string_view(reinterpret_cast<const char*>(digest.data()), size));
}

std::string NewRequestId() {
  // RFC 9562 UUIDv7: 48-bit Unix milliseconds, version 7, 12 bits that keep ids made in the
  // same millisecond by this process ordered (a counter, method 1 of section 6.2), variant 10,
  // then 62 random bits.
  static std::atomic<uint64_t> last_stamp{0};  // (millis << 12) | counter
  const uint64_t millis =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  uint64_t stamp = millis << 12;
  uint64_t previous = last_stamp.load(std::memory_order_relaxed);
  do {
    if (stamp <= previous) stamp = previous + 1;  // same millisecond, or the clock went back
  } while (!last_stamp.compare_exchange_weak(previous, stamp, std::memory_order_relaxed));

  // The random bits only keep ids of different processes apart (the stamp orders this
  // process's own): RandomSeed never fails.
  std::array<char, 16> bytes{};
  const uint64_t unix_millis = stamp >> 12;
  const uint64_t counter = stamp & 0xFFF;
  util::StoreBigEndian(bytes.data(), (unix_millis << 16) | 0x7000 | counter);
  util::StoreBigEndian(bytes.data() + 8,
                       (util::RandomSeed() & ~(uint64_t{3} << 62)) | (uint64_t{2} << 62));

  std::string text;
  text.reserve(36);
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    util::AppendHexByte(text, static_cast<unsigned char>(bytes[i]));
  }
  return text;
}

}  // namespace idem
