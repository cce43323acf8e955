// Times as idem stores and sends them: signed microseconds since the Unix epoch, the precision
// of both the on-disk record format and the wire protocol.

#ifndef IDEM_UTIL_TIME_H_
#define IDEM_UTIL_TIME_H_

#include <chrono>
#include <cstdint>

namespace idem::util {

inline int64_t ToMicros(std::chrono::system_clock::time_point time) {
  return std::chrono::duration_cast<std::chrono::microseconds>(time.time_since_epoch()).count();
}

// The microseconds a system_clock::time_point can hold (about +-292 years around 1970 with
// nanosecond ticks): FromMicros of a value outside them overflows, so a decoder checks a value
// it did not write with MicrosFitTimePoint first (found by fuzz/fuzz_record_decoder).
inline constexpr int64_t kMinMicros = std::chrono::duration_cast<std::chrono::microseconds>(
                                          std::chrono::system_clock::duration::min())
                                          .count();
inline constexpr int64_t kMaxMicros = std::chrono::duration_cast<std::chrono::microseconds>(
                                          std::chrono::system_clock::duration::max())
                                          .count();
inline bool MicrosFitTimePoint(int64_t micros) {
  return micros >= kMinMicros && micros <= kMaxMicros;
}

inline std::chrono::system_clock::time_point FromMicros(int64_t micros) {
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::microseconds(micros)));
}

// `time` truncated to what idem stores, so that a record reads back equal.
inline std::chrono::system_clock::time_point TruncateToMicros(
    std::chrono::system_clock::time_point time) {
  return FromMicros(ToMicros(time));
}

}  // namespace idem::util

#endif  // IDEM_UTIL_TIME_H_
