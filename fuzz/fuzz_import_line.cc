// libFuzzer target: one line of `idem import`'s input (idem::cli::ParseImportLine). It is
// accepted or refused with kInvalidArgument, and what is accepted reads back equal from its
// export. See fuzz/README.md.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string failure =
      idem::fuzz::CheckImportLine(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!failure.empty()) {
    std::fprintf(stderr, "fuzz_import_line: %s\n", failure.c_str());
    std::abort();
  }
  return 0;
}
