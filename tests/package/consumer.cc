#include <idem/idem.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  // Links the PostgreSQL pieces too (when built with them): the package must bring libpq.
  if (idem::DisplayStoreName("postgresql://app:secret@db/orders").find("secret") !=
      std::string::npos) {
    return 1;
  }
  auto store = idem::Store::Open(argv[1]);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  int runs = 0;
  for (int i = 0; i < 3; ++i) {
    auto done = (*store)->Execute("order-1", [&](idem::Attempt&) -> idem::Result<std::string> {
      ++runs;
      return std::string("receipt");
    });
    if (!done.ok() || done->result != "receipt") return 1;
  }
  std::printf("ran %d time(s)\n", runs);
  return runs == 1 ? 0 : 1;
}
