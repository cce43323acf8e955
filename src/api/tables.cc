#include "idem/tables.h"

namespace idem {

void WriteSet::Put(std::string_view table, std::string_view key, std::string_view value,
                   std::optional<uint64_t> if_version) {
  writes_.push_back({.table = std::string(table),
                     .key = std::string(key),
                     .value = std::string(value),
                     .if_version = if_version});
}

void WriteSet::Delete(std::string_view table, std::string_view key,
                      std::optional<uint64_t> if_version) {
  writes_.push_back({.table = std::string(table),
                     .key = std::string(key),
                     .value = std::nullopt,
                     .if_version = if_version});
}

void WriteSet::Require(std::string_view table, std::string_view key, uint64_t version) {
  requirements_.push_back(
      {.table = std::string(table), .key = std::string(key), .version = version});
}

}  // namespace idem
