// The names RocksDB gives its files ("000075.log", "MANIFEST-000016"), read back.

#ifndef IDEM_STORAGE_ROCKSDB_FS_FILE_NAMES_H_
#define IDEM_STORAGE_ROCKSDB_FS_FILE_NAMES_H_

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace idem::storage {

// "/path/to/000075.log" -> "000075.log".
inline std::string_view BaseName(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// "000075" -> 75; nothing for an empty string or anything but decimal digits.
inline std::optional<uint64_t> ParseNumber(std::string_view digits) {
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || error != std::errc() || end != digits.data() + digits.size()) {
    return std::nullopt;
  }
  return value;
}

// The number in a base name `prefix` + digits + `suffix`: FileNumber("000075.log", "", ".log")
// is 75, FileNumber("MANIFEST-000016", "MANIFEST-", "") is 16.
inline std::optional<uint64_t> FileNumber(std::string_view name, std::string_view prefix,
                                          std::string_view suffix) {
  if (name.size() < prefix.size() + suffix.size() || name.substr(0, prefix.size()) != prefix ||
      name.substr(name.size() - suffix.size()) != suffix) {
    return std::nullopt;
  }
  return ParseNumber(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size()));
}

}  // namespace idem::storage

#endif  // IDEM_STORAGE_ROCKSDB_FS_FILE_NAMES_H_
