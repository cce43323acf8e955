// libFuzzer target: the `idem` command line (idem::cli::Run) on arbitrary arguments, with every
// path replaced by one that cannot exist, so no store is opened. It must return an exit code of
// 0-3 and never crash or hang. See fuzz/README.md.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string failure =
      idem::fuzz::CheckCli(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!failure.empty()) {
    std::fprintf(stderr, "fuzz_cli: %s\n", failure.c_str());
    std::abort();
  }
  return 0;
}
