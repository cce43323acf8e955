// Writes the seed corpus of the fuzz targets (seeds.h). Usage: fuzz_make_seeds DIR (writes
// DIR/<target>/<name>; normally DIR is fuzz/corpus). Built by the fuzz build and, as
// tests/fuzz_make_seeds, by the normal build with tests.

#include <filesystem>
#include <fstream>
#include <iostream>

#include "seeds.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc != 2) {
    std::cerr << "usage: fuzz_make_seeds DIR (writes DIR/record_decoder, DIR/frame_decoder, "
                 "DIR/record_counts, "
                 "DIR/import_line, DIR/cli)\n";
    return 2;
  }
  const fs::path root = argv[1];
  bool ok = true;
  for (const idem::fuzz::Seed& seed : idem::fuzz::MakeSeeds()) {
    const fs::path dir = root / seed.target;
    fs::create_directories(dir);
    std::ofstream file(dir / seed.name, std::ios::binary | std::ios::trunc);
    file.write(seed.bytes.data(), static_cast<std::streamsize>(seed.bytes.size()));
    if (!file) {
      std::cerr << "fuzz_make_seeds: cannot write " << (dir / seed.name) << '\n';
      ok = false;
    }
  }
  return ok ? 0 : 1;
}
