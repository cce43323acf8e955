// libFuzzer target: the record counts an owner keeps at a clean close
// (backend::RecordCounts::Decode) on arbitrary bytes, counting from whatever it accepts, and the
// round trip Encode -> Decode of it. See fuzz/README.md.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string failure =
      idem::fuzz::CheckRecordCounts(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!failure.empty()) {
    std::fprintf(stderr, "fuzz_record_counts: %s\n", failure.c_str());
    std::abort();
  }
  return 0;
}
