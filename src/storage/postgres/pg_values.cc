// PgParam and PgRows (pg_pool.h): values sent to and read from the server in its binary
// format, checked by type and size.

#include <fmt/format.h>
#include <libpq-fe.h>

#include <charconv>

#include "storage/postgres/pg_pool.h"
#include "util/coding.h"

namespace idem::storage {
namespace {

// Between 2000-01-01 (PostgreSQL's epoch) and 1970-01-01, in microseconds.
constexpr int64_t kPgEpochMicros = int64_t{946684800} * 1000000;

template <class Unsigned>
std::string BigEndian(Unsigned value) {
  std::string bytes(sizeof value, '\0');
  util::StoreBigEndian(bytes.data(), value);
  return bytes;
}

template <class Unsigned>
Unsigned FromBigEndian(std::string_view bytes) {
  return util::GetBigEndian<Unsigned>(bytes.data());
}

std::string_view TypeName(uint32_t type) {
  switch (type) {
    case kPgBoolOid:
      return "boolean";
    case kPgInt2Oid:
      return "smallint";
    case kPgInt4Oid:
      return "integer";
    case kPgInt8Oid:
      return "bigint";
    case kPgTimestamptzOid:
      return "timestamptz";
    default:
      return "another type";
  }
}

}  // namespace

PgParam PgParam::Bytea(std::string_view bytes) { return {kPgByteaOid, std::string(bytes)}; }
PgParam PgParam::Text(std::string_view text) { return {kPgTextOid, std::string(text)}; }
PgParam PgParam::Int2(int16_t value) {
  return {kPgInt2Oid, BigEndian(static_cast<uint16_t>(value))};
}
PgParam PgParam::Int8(int64_t value) {
  return {kPgInt8Oid, BigEndian(static_cast<uint64_t>(value))};
}
PgParam PgParam::Bool(bool value) { return {kPgBoolOid, std::string(1, value ? '\1' : '\0')}; }
PgParam PgParam::Timestamp(int64_t unix_micros) {
  return {kPgTimestamptzOid, BigEndian(static_cast<uint64_t>(unix_micros - kPgEpochMicros))};
}
PgParam PgParam::Null(uint32_t type) { return {type, std::nullopt}; }
PgParam PgParam::Untyped(std::optional<std::string_view> text) {
  return {
      .type = 0, .value = text ? std::optional<std::string>(*text) : std::nullopt, .text = true};
}

void PgRows::Clear::operator()(pg_result* result) const { PQclear(result); }

int PgRows::size() const { return PQntuples(result_.get()); }
int PgRows::columns() const { return PQnfields(result_.get()); }

uint64_t PgRows::affected() const {
  const std::string_view text = PQcmdTuples(result_.get());
  uint64_t count = 0;
  std::from_chars(text.data(), text.data() + text.size(), count);
  return count;
}

std::string_view PgRows::ColumnName(int column) const {
  if (column < 0 || column >= columns()) return {};
  return PQfname(result_.get(), column);
}

bool PgRows::IsNull(int row, int column) const {
  return PQgetisnull(result_.get(), row, column) != 0;
}

std::string_view PgRows::Bytes(int row, int column) const {
  if (row < 0 || row >= size() || column < 0 || column >= columns()) return {};
  return {PQgetvalue(result_.get(), row, column),
          static_cast<std::size_t>(PQgetlength(result_.get(), row, column))};
}

Result<std::string_view> PgRows::Fixed(int row, int column, uint32_t type, std::size_t size) const {
  const char* name = column >= 0 && column < columns() ? PQfname(result_.get(), column) : "?";
  if (row < 0 || row >= this->size() || column < 0 || column >= columns()) {
    return Status::Corruption(
        fmt::format("PostgreSQL returned no value at row {}, column {} ({})", row, column, name));
  }
  if (PQftype(result_.get(), column) != type || IsNull(row, column) ||
      Bytes(row, column).size() != size) {
    return Status::Corruption(fmt::format(
        "column {} ({}) is {} of type oid {} and {} bytes; expected a {} ({} bytes)", column, name,
        IsNull(row, column) ? "NULL" : "a value", PQftype(result_.get(), column),
        Bytes(row, column).size(), TypeName(type), size));
  }
  return Bytes(row, column);
}

Result<int64_t> PgRows::Int(int row, int column) const {
  const uint32_t type = column >= 0 && column < columns() ? PQftype(result_.get(), column) : 0;
  if (type == kPgInt2Oid) {
    IDEM_ASSIGN_OR_RETURN(const std::string_view bytes, Fixed(row, column, type, 2));
    return static_cast<int16_t>(FromBigEndian<uint16_t>(bytes));
  }
  if (type == kPgInt4Oid) {
    IDEM_ASSIGN_OR_RETURN(const std::string_view bytes, Fixed(row, column, type, 4));
    return static_cast<int32_t>(FromBigEndian<uint32_t>(bytes));
  }
  IDEM_ASSIGN_OR_RETURN(const std::string_view bytes, Fixed(row, column, kPgInt8Oid, 8));
  return static_cast<int64_t>(FromBigEndian<uint64_t>(bytes));
}

Result<bool> PgRows::Bool(int row, int column) const {
  IDEM_ASSIGN_OR_RETURN(const std::string_view bytes, Fixed(row, column, kPgBoolOid, 1));
  return bytes[0] != 0;
}

Result<int64_t> PgRows::Timestamp(int row, int column) const {
  IDEM_ASSIGN_OR_RETURN(const std::string_view bytes, Fixed(row, column, kPgTimestamptzOid, 8));
  const auto micros = static_cast<int64_t>(FromBigEndian<uint64_t>(bytes));
  int64_t unix_micros = 0;
  if (__builtin_add_overflow(micros, kPgEpochMicros, &unix_micros)) {
    return Status::Corruption(fmt::format("column {} ({}) is an infinite or out-of-range time",
                                          column, PQfname(result_.get(), column)));
  }
  return unix_micros;
}

}  // namespace idem::storage
