// libFuzzer target: the socket protocol's decoders (sharing::DecodeRequest, DecodeResponse and
// the response bodies: claim, optional record, scan page, counters, count) on arbitrary bytes,
// and the round trip through the matching encoder of whatever they accept. See fuzz/README.md.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string failure =
      idem::fuzz::CheckFrameDecoder(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!failure.empty()) {
    std::fprintf(stderr, "fuzz_frame_decoder: %s\n", failure.c_str());
    std::abort();
  }
  return 0;
}
