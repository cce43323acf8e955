// `idem import`: records from JSON Lines (docs/format.md, "Export format") into a store directory
// that no other process uses, or a store in PostgreSQL. The whole input is checked before anything
// is written: a bad line, or a key the store holds already, is named with its line number and
// nothing is imported.

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "commands.h"
#include "export_format.h"
#include "text.h"

namespace idem::cli {
namespace {

// Records written per Store::Import call (one sync each), and the bytes that end a batch sooner.
constexpr std::size_t kBatchRecords = 1000;
constexpr std::size_t kBatchBytes = 16 << 20;

// The input, read twice: once to check every line, once to write. A file is opened twice;
// standard input is kept in memory.
class Input {
 public:
  explicit Input(const std::string& name) : name_(name) {}

  // Starts (again) at the first line. False when the file cannot be read.
  bool Rewind() {
    if (name_ == "-") {
      if (!stdin_) {
        stdin_ = std::make_unique<std::string>(std::istreambuf_iterator<char>(std::cin),
                                               std::istreambuf_iterator<char>());
      }
      stream_ = std::make_unique<std::istringstream>(*stdin_);
    } else {
      stream_ = std::make_unique<std::ifstream>(name_, std::ios::binary);
    }
    number_ = 0;
    return stream_->good() || stream_->eof();
  }

  // The next line that is not empty, and its number (from 1); false at the end.
  bool Next(std::string& line, uint64_t& number) {
    while (std::getline(*stream_, line)) {
      ++number_;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      number = number_;
      return true;
    }
    return false;
  }

  // True when reading stopped at the end of the input, not at an error.
  bool AtEnd() const { return stream_->eof(); }

  std::string Shown() const { return name_ == "-" ? "standard input" : DisplayEscape(name_); }

 private:
  const std::string name_;
  std::unique_ptr<std::string> stdin_;
  std::unique_ptr<std::istream> stream_;
  uint64_t number_ = 0;
};

// The limits the store's owner (this process) checks, checked before anything is written.
Status CheckLimits(const Record& record, const Options& options) {
  const std::pair<std::string_view, std::pair<std::size_t, std::size_t>> sizes[] = {
      {"key", {record.key.size(), options.max_key_size}},
      {"type", {record.type.size(), options.max_label_size}},
      {"fingerprint", {record.fingerprint.size(), options.max_label_size}},
      {"result", {record.result.size(), options.max_result_size}},
      {"checkpoint", {record.checkpoint.size(), options.max_result_size}},
  };
  for (const auto& [field, size] : sizes) {
    if (size.first > size.second) {
      return Status::InvalidArgument(
          fmt::format("{}: {} bytes; the limit is {}", field, size.first, size.second));
    }
  }
  return Status::OK();
}

}  // namespace

int Import(const Context& ctx, const ImportArgs& args) {
  const std::string& path = args.path;
  Options options = ctx.StoreOptions(/*read_only=*/false);
  // With --create, a new store may be made for the import (a restore into a new directory, or
  // new tables). Nobody else may use a store directory meanwhile: the check of every key before
  // the first write stays true, and no application sees half an import. (A store in PostgreSQL
  // has no owner to exclude others: a key an application takes meanwhile is left as it is.)
  options.create_if_missing = args.create;
  options.sharing = Sharing::kExclusive;
  auto store = Store::Open(path, options);
  if (!store.ok()) {
    if (store.status().code() == Status::Code::kBusy) {
      return ctx.Fail(kExitStoreError,
                      fmt::format("store {} is in use ({}); import needs the store to itself: "
                                  "stop the applications that use it, or import into a new "
                                  "store",
                                  DisplayEscape(ctx.StoreName(path)), store.status().message()));
    }
    return ctx.StoreError(path, store.status());
  }
  const Options& limits = (*store)->options();

  Input input(args.input);
  const auto unreadable = [&] {
    return ctx.Fail(kExitStoreError, fmt::format("cannot read {}", input.Shown()));
  };
  const auto refuse = [&](uint64_t number, std::string_view why) {
    return ctx.Fail(kExitInputRefused, fmt::format("{} line {}: {}; nothing was imported",
                                                   input.Shown(), number, why));
  };
  // Every line's defaults (`created` absent) are this one moment.
  const TimePoint now = ctx.Now();

  // Pass 1: every line parses, fits the limits, names a key no other line names, and (unless
  // --skip-existing) a key the store does not hold.
  if (!input.Rewind()) return unreadable();
  std::unordered_map<std::string, uint64_t> first_line;  // key -> the line that names it
  // Per table, its keys and the line that names each.
  std::map<std::string, std::unordered_map<std::string, uint64_t>> first_value_line;
  std::string line;
  uint64_t number = 0;
  while (input.Next(line, number)) {
    Result<std::optional<ExportedTableValue>> value = ParseTableValueLine(line);
    if (!value.ok()) return refuse(number, value.status().message());
    if (*value) {
      const ExportedTableValue& v = **value;
      if (v.key.size() > limits.max_key_size || v.value.size() > limits.max_result_size) {
        return refuse(number, fmt::format("key or value of table {} above the store's limits "
                                          "(max_key_size {}, max_result_size {})",
                                          v.table, limits.max_key_size, limits.max_result_size));
      }
      const auto [seen, added] = first_value_line[v.table].emplace(v.key, number);
      if (!added) {
        return refuse(number, fmt::format("key '{}' of table {} is also on line {}",
                                          DisplayEscape(v.key), v.table, seen->second));
      }
      // Read even with --skip-existing: a bad table name or key is refused here, before
      // anything is written.
      Result<TableValue> stored = (*store)->GetValue(v.table, v.key);
      if (!stored.ok()) {
        if (stored.status().code() == Status::Code::kInvalidArgument) {
          return refuse(number, stored.status().message());
        }
        return ctx.StoreError(path, stored.status());
      }
      if (!args.skip_existing && stored->version != 0) {
        return refuse(number, fmt::format("key '{}' of table {} was written in the store already "
                                          "(--skip-existing leaves such values as they are)",
                                          DisplayEscape(v.key), v.table));
      }
      continue;
    }
    Result<Record> record = ParseExportLine(line, now);
    if (!record.ok()) return refuse(number, record.status().message());
    if (Status fits = CheckLimits(*record, limits); !fits.ok()) {
      return refuse(number, fits.message());
    }
    const auto [seen, added] = first_line.emplace(record->key, number);
    if (!added) {
      return refuse(number, fmt::format("key '{}' is also on line {}", DisplayEscape(record->key),
                                        seen->second));
    }
    if (!args.skip_existing) {
      Result<std::optional<Record>> stored = (*store)->Get(record->key);
      if (!stored.ok()) return ctx.StoreError(path, stored.status());
      if (stored->has_value()) {
        return refuse(number, fmt::format("key '{}' is in the store already (--skip-existing "
                                          "leaves such records as they are)",
                                          DisplayEscape(record->key)));
      }
    }
  }
  if (!input.AtEnd()) return unreadable();
  first_line = {};
  first_value_line = {};

  // Pass 2: the same lines, written in batches.
  if (!input.Rewind()) return unreadable();
  uint64_t imported = 0, present = 0, expired = 0, values_imported = 0, values_present = 0;
  std::vector<Record> batch;
  std::size_t batch_bytes = 0;
  // Table values, batched per table the same way.
  std::map<std::string, std::vector<std::pair<std::string, TableValue>>> value_batches;
  std::size_t values_batched = 0;
  const auto write_values = [&]() -> Status {
    for (auto& [table, values] : value_batches) {
      IDEM_ASSIGN_OR_RETURN(std::vector<ImportOutcome> outcomes,
                            (*store)->ImportValues(table, values));
      for (const ImportOutcome outcome : outcomes) {
        values_imported += outcome == ImportOutcome::kImported ? 1 : 0;
        values_present += outcome == ImportOutcome::kPresent ? 1 : 0;
      }
    }
    value_batches.clear();
    values_batched = 0;
    return Status::OK();
  };
  const auto write = [&]() -> Status {
    IDEM_ASSIGN_OR_RETURN(std::vector<ImportOutcome> outcomes, (*store)->Import(batch));
    for (const ImportOutcome outcome : outcomes) {
      imported += outcome == ImportOutcome::kImported ? 1 : 0;
      present += outcome == ImportOutcome::kPresent ? 1 : 0;
      expired += outcome == ImportOutcome::kExpired ? 1 : 0;
    }
    batch.clear();
    batch_bytes = 0;
    return Status::OK();
  };
  // The input read again differs only if it changed meanwhile; the batches before are written.
  const auto changed = [&](uint64_t at) {
    return ctx.Fail(kExitStoreError,
                    fmt::format("{} changed while it was imported (line {} could not be read "
                                "again); {} records were imported before it",
                                input.Shown(), at, imported));
  };
  while (input.Next(line, number)) {
    Result<std::optional<ExportedTableValue>> value = ParseTableValueLine(line);
    if (!value.ok()) return changed(number);
    if (*value) {
      ExportedTableValue& v = **value;
      value_batches[v.table].emplace_back(std::move(v.key),
                                          TableValue{std::move(v.value), v.version});
      if (++values_batched >= kBatchRecords) {
        if (Status written = write_values(); !written.ok()) return ctx.StoreError(path, written);
      }
      continue;
    }
    Result<Record> record = ParseExportLine(line, now);
    if (!record.ok()) return changed(number);
    batch_bytes += line.size();
    batch.push_back(std::move(*record));
    if (batch.size() >= kBatchRecords || batch_bytes >= kBatchBytes) {
      if (Status written = write(); !written.ok()) return ctx.StoreError(path, written);
    }
  }
  if (!input.AtEnd()) return changed(number + 1);
  if (!batch.empty()) {
    if (Status written = write(); !written.ok()) return ctx.StoreError(path, written);
  }
  if (values_batched > 0) {
    if (Status written = write_values(); !written.ok()) return ctx.StoreError(path, written);
  }
  store->reset();
  std::string summary = fmt::format("imported {} records", imported);
  if (present > 0) summary += fmt::format("; {} left as they were (key in the store)", present);
  if (expired > 0) summary += fmt::format("; {} not imported (retention passed)", expired);
  if (values_imported > 0) summary += fmt::format("; {} table values", values_imported);
  if (values_present > 0) {
    summary +=
        fmt::format("; {} table values left as they were (written in the store)", values_present);
  }
  fmt::print(ctx.out, "{}\n", summary);
  return ctx.FinishOutput(kExitOk);
}

}  // namespace idem::cli
