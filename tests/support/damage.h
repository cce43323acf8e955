// Damage made to a store directory's files behind idem's back, as a disk's decay makes it.

#ifndef IDEM_TESTS_SUPPORT_DAMAGE_H_
#define IDEM_TESTS_SUPPORT_DAMAGE_H_

#include <filesystem>
#include <fstream>
#include <string>

namespace idem_test {

// Writes 64 bytes of garbage in the middle of the largest table file (the records') of the store
// directory `path`, first made a file of its own: not linked with a backup's, and not the inode a
// running owner has open, so that only a new read of it sees the damage. Returns its path (empty
// when there is no table file).
inline std::filesystem::path DamageLargestTableFile(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path largest;
  for (const auto& entry : fs::directory_iterator(path + "/db")) {
    if (entry.path().extension() != ".sst") continue;
    if (largest.empty() || entry.file_size() > fs::file_size(largest)) largest = entry.path();
  }
  if (largest.empty()) return largest;
  const std::string copy = largest.string() + ".copy";
  fs::copy_file(largest, copy);
  fs::rename(copy, largest);
  std::fstream file(largest, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(static_cast<std::streamoff>(fs::file_size(largest) / 2));
  const std::string garbage(64, '\x5a');
  file.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  return largest;
}

}  // namespace idem_test

#endif  // IDEM_TESTS_SUPPORT_DAMAGE_H_
