// EngineBackend's data in and out: scans of records and table values, backups and imports.
#include <fmt/format.h>

#include <algorithm>

#include "backend/engine_backend.h"
#include "util/escape.h"

namespace idem::backend {
namespace {

// A scan page stops at this many bytes of results and checkpoints, so that a page of large
// records stays a reasonable frame on the socket.
constexpr std::size_t kScanPageBytes = 1 << 20;

}  // namespace

Result<std::vector<ImportOutcome>> EngineBackend::ImportValues(
    std::string_view table, std::span<const std::pair<std::string, TableValue>> values) {
  IDEM_RETURN_IF_ERROR(CheckWritable());
  IDEM_RETURN_IF_ERROR(CheckTableName(table));  // also when there are no values
  IDEM_RETURN_IF_ERROR(CheckFilesUndamaged());
  for (const auto& [key, value] : values) {
    IDEM_RETURN_IF_ERROR(CheckTableWrite(table, key, value.value));
    if (!value.value || value.version == 0) {
      return Status::InvalidArgument(fmt::format(
          "value {} of table {} is absent or at version 0: only written values are imported",
          EscapeKey(key), table));
    }
    if (value.version > TableValue::kLargestVersion) {
      return Status::InvalidArgument(
          fmt::format("value {} of table {} is at version {}, above the largest, {}",
                      EscapeKey(key), table, value.version, TableValue::kLargestVersion));
    }
  }
  IDEM_ASSIGN_OR_RETURN(std::vector<ImportOutcome> outcomes, storage_->ImportValues(table, values));
  if (std::find(outcomes.begin(), outcomes.end(), ImportOutcome::kImported) != outcomes.end()) {
    IDEM_RETURN_IF_ERROR(storage_->Sync());
  }
  return outcomes;
}

Result<engine::TablePage> EngineBackend::ScanTable(std::string_view table,
                                                   const ScanOptions& options, std::size_t limit,
                                                   uint64_t view) {
  IDEM_RETURN_IF_ERROR(CheckTableName(table));
  engine::TablePage page;
  std::size_t bytes = 0;
  IDEM_RETURN_IF_ERROR(views_.With(view, [&](storage::ReadView* read_view) {
    return storage_->ScanValues(
        table, options,
        [&](std::string_view key, TableValue&& value) {
          if (page.values.size() >= limit || bytes >= kScanPageBytes) {
            page.more = true;
            return false;
          }
          bytes += key.size() + value.value->size();
          page.values.emplace_back(std::string(key), std::move(value));
          return true;
        },
        read_view);
  }));
  return page;
}

Result<engine::ScanPage> EngineBackend::Scan(const ScanOptions& options, std::size_t limit,
                                             uint64_t view) {
  engine::ScanPage page;
  std::size_t bytes = 0;
  IDEM_RETURN_IF_ERROR(CountedError(views_.With(view, [&](storage::ReadView* read_view) {
    return storage_->Scan(
        options,
        [&](Record&& stored, TimePoint now) {
          if (page.records.size() >= limit || bytes >= kScanPageBytes) {
            page.more = true;
            return false;
          }
          std::optional<Record> visible = engine::Visible(std::move(stored), now);
          if (visible) {
            bytes += visible->key.size() + visible->result.size() + visible->checkpoint.size();
            page.records.push_back(std::move(*visible));
          }
          return true;
        },
        read_view);
  })));
  return page;
}

Status EngineBackend::Backup(const std::string& destination) {
  // A read-only instance cannot flush its memtables, which the copy starts with.
  if (options_.read_only) {
    return Status::InvalidArgument(
        "the store was opened read-only; a backup needs it writable "
        "(it changes no record)");
  }
  return write_backup_ ? write_backup_(*storage_, destination) : storage_->Checkpoint(destination);
}

Status EngineBackend::CheckImported(const Record& record) const {
  const auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(
        fmt::format("record {} cannot be imported: {}", EscapeKey(record.key), why));
  };
  if (Status key = CheckKey(record.key); !key.ok()) return bad(key.message());
  const std::pair<std::string_view, std::pair<std::size_t, std::size_t>> sizes[] = {
      {"type", {record.type.size(), options_.max_label_size}},
      {"fingerprint", {record.fingerprint.size(), options_.max_label_size}},
      {"result", {record.result.size(), options_.max_result_size}},
      {"checkpoint", {record.checkpoint.size(), options_.max_result_size}},
  };
  for (const auto& [what, size] : sizes) {
    if (Status checked = CheckSize(what, size.first, size.second); !checked.ok()) {
      return bad(checked.message());
    }
  }
  if (static_cast<uint8_t>(record.state) > static_cast<uint8_t>(State::kFailed)) {
    return bad(fmt::format("state {} is not 0 (pending), 1 (done) or 2 (failed)",
                           static_cast<int>(record.state)));
  }
  if (record.retryable && record.state != State::kFailed) {
    return bad("only a failed record can be retryable");
  }
  if (record.attempts == 0) return bad("attempts is 0; a record was acquired at least once");
  if (record.token > storage::kMaxToken) {
    return bad(fmt::format("token {} is above {} (2^63-1), the largest token a store holds",
                           record.token, storage::kMaxToken));
  }
  return Status::OK();
}

Result<ImportOutcome> EngineBackend::ImportOne(const Record& record) {
  ImportOutcome outcome = ImportOutcome::kImported;
  Record written;
  Status drawn;
  IDEM_RETURN_IF_ERROR(storage_->Update(
      record.key,
      [&](std::optional<Record>& stored, TimePoint now,
          engine::NextToken next_token) -> const Record* {
        if (stored && !engine::IsExpired(*stored, now)) {
          outcome = ImportOutcome::kPresent;
          return nullptr;
        }
        if (engine::IsExpired(record, now)) {
          outcome = ImportOutcome::kExpired;
          return nullptr;
        }
        outcome = ImportOutcome::kImported;
        written = record;
        written.timed_out = false;
        // As a Complete or a Fail leaves it (a file may carry a holder with a done record).
        if (written.state != State::kPending) engine::ForgetHolder(written);
        if (written.token == 0) {
          Result<uint64_t> token = next_token(stored ? stored->token : 0);
          if (!token.ok()) {
            drawn = token.status();
            return nullptr;
          }
          written.token = *token;
        }
        return &written;
      },
      Durability::kBuffered, /*absent_since=*/std::nullopt));
  IDEM_RETURN_IF_ERROR(drawn);
  return outcome;
}

Result<std::vector<ImportOutcome>> EngineBackend::Import(std::span<const Record> records) {
  IDEM_RETURN_IF_ERROR(CheckWritable());
  IDEM_RETURN_IF_ERROR(CheckFilesUndamaged());
  uint64_t highest = 0;
  for (const Record& record : records) {
    IDEM_RETURN_IF_ERROR(CheckImported(record));
    highest = std::max(highest, record.token);
  }
  // Before any record is written: once one is on disk with its token, the counter is above it,
  // even after a crash (the ceiling is persisted first).
  if (highest > 0) IDEM_RETURN_IF_ERROR(storage_->ReserveTokensAbove(highest));
  std::vector<ImportOutcome> outcomes;
  outcomes.reserve(records.size());
  // The records go to the storage in a write group (storage.h): one write for up to the group's
  // limit instead of one each, every record still decided alone under its key's lock. The group
  // is finished on every path, so that no key stays locked.
  StartWriteGroup();
  const Status decided = [&]() -> Status {
    for (const Record& record : records) {
      IDEM_ASSIGN_OR_RETURN(const ImportOutcome outcome, ImportOne(record));
      outcomes.push_back(outcome);
    }
    return Status::OK();
  }();
  const std::vector<Status> written = FinishWriteGroup();
  IDEM_RETURN_IF_ERROR(decided);
  for (const Status& write : written) IDEM_RETURN_IF_ERROR(write);
  // One sync for the batch: RocksDB's log is written in order, so it makes every write before
  // it durable.
  if (std::find(outcomes.begin(), outcomes.end(), ImportOutcome::kImported) != outcomes.end()) {
    IDEM_RETURN_IF_ERROR(storage_->Sync());
  }
  return outcomes;
}

}  // namespace idem::backend
