#include "idem/sql.h"

#include <algorithm>

namespace idem {

SqlRows::SqlRows(std::vector<std::string> column_names,
                 std::vector<std::optional<std::string>> values, uint64_t affected)
    : column_names_(std::move(column_names)), values_(std::move(values)), affected_(affected) {}

int SqlRows::size() const {
  return column_names_.empty() ? 0 : static_cast<int>(values_.size() / column_names_.size());
}

std::optional<std::string_view> SqlRows::Get(int row, int column) const {
  if (row < 0 || row >= size() || column < 0 || column >= columns()) return std::nullopt;
  const std::optional<std::string>& value =
      values_[static_cast<std::size_t>(row) * column_names_.size() + column];
  if (!value) return std::nullopt;
  return std::string_view(*value);
}

std::optional<std::string_view> SqlRows::Get(int row, std::string_view column) const {
  const auto named = std::find(column_names_.begin(), column_names_.end(), column);
  if (named == column_names_.end()) return std::nullopt;
  return Get(row, static_cast<int>(named - column_names_.begin()));
}

}  // namespace idem
