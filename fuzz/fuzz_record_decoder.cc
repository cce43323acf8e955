// libFuzzer target: the on-disk record decoder (storage::DecodeRecord) on arbitrary bytes, and
// the round trip EncodeRecord -> DecodeRecord of whatever it accepts. See fuzz/README.md.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string failure =
      idem::fuzz::CheckRecordDecoder(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!failure.empty()) {
    std::fprintf(stderr, "fuzz_record_decoder: %s\n", failure.c_str());
    std::abort();
  }
  return 0;
}
