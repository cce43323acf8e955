// `idem import`: records and table values from JSON Lines (docs/format.md, "Export format") into
// a store directory that no other process uses, or a store in PostgreSQL. All or nothing: the
// input is read once, a line at a time in bounded memory (import_input.h), checked line by line
// and written into a staging store (import_store.h); a bad line, or a key the store holds
// already, is named with its line number and nothing is imported. Only a whole, checked input
// reaches the store: a new store directory is the staging store renamed into place; an existing
// one is marked unfinished while the staged import is copied into it.

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <unordered_map>
#include <variant>
#include <vector>

#include "cli.h"
#include "commands.h"
#include "export_format.h"
#include "import_input.h"
#include "import_store.h"
#include "progress_line.h"
#include "summary.h"
#include "text.h"
#include "util/escape.h"
#include "util/pg_uri.h"

namespace idem::cli {
namespace {

namespace fs = std::filesystem;

// Records (or table values) staged per Import call, and the bytes that end a batch sooner.
constexpr std::size_t kBatchRecords = 1000;
constexpr std::size_t kBatchBytes = 16 << 20;

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

// Reads the input once, checks every line (against `target` too, when the import goes into an
// existing store) and writes it into `staging`, which started empty: a key present there is a
// key an earlier line gave. kExitOk, or the exit code after saying why (nothing was imported
// into the store: the caller throws the staging store away).
class Stager {
 public:
  Stager(const Context& ctx, const ImportArgs& args, ImportInput& input, Store& staging,
         Store* target, ProgressLine& progress)
      : ctx_(ctx),
        args_(args),
        input_(input),
        staging_(staging),
        target_(target),
        progress_(progress) {}

  int Run() {
    std::string line;
    uint64_t number = 0;
    for (;;) {
      switch (input_.Next(line, number)) {
        case ImportInput::Read::kLine:
          break;
        case ImportInput::Read::kEnd:
          return Flush();
        case ImportInput::Read::kTooLong:
          return Refuse(number, fmt::format("the line is longer than {} bytes, the longest a "
                                            "record can take in this store (docs/format.md)",
                                            LongestLine(staging_.options())));
        case ImportInput::Read::kError:
          return ctx_.Fail(kExitStoreError,
                           fmt::format("cannot read {}: {}; nothing was imported", input_.Shown(),
                                       std::strerror(input_.error())));
      }
      if (const int code = Take(line, number); code != kExitOk) return code;
      if (batched_ >= kBatchRecords || batch_bytes_ >= kBatchBytes) {
        if (const int code = Flush(); code != kExitOk) return code;
        if (progress_.Due()) ShowProgress(number);
      }
    }
  }

  uint64_t imported = 0, expired = 0, values_imported = 0;

 private:
  // "checked 120000 lines, 12.0 MiB of 48.0 MiB read (25%)": of the input's size when it is a
  // file, otherwise what was read.
  void ShowProgress(uint64_t lines) {
    const uint64_t read = input_.bytes_taken();
    const std::optional<uint64_t> size = input_.size();
    progress_.Show(
        size && *size > 0
            ? fmt::format("idem import: checked {} lines, {} of {} read ({}%) ...", lines,
                          HumanBytes(read), HumanBytes(*size),
                          std::min<uint64_t>(read, *size) * 100 / *size)
            : fmt::format("idem import: checked {} lines, {} read ...", lines, HumanBytes(read)));
  }

  int Refuse(uint64_t number, std::string_view why) {
    return ctx_.Fail(kExitInputRefused, fmt::format("{} line {}: {}; nothing was imported",
                                                    input_.Shown(), number, why));
  }

  // Whether `key` (of `table`, or a record's when empty) is given on an earlier line of this
  // batch: the store's answer does not say which line, this batch's does.
  int Repeated(const std::string& table, const std::string& key, uint64_t number) {
    const auto [seen, added] = batch_lines_.emplace(table + '\0' + key, number);
    if (added) return kExitOk;
    return Refuse(number, table.empty() ? fmt::format("key '{}' is also on line {}",
                                                      DisplayEscape(key), seen->second)
                                        : fmt::format("key '{}' of table {} is also on line {}",
                                                      DisplayEscape(key), table, seen->second));
  }

  int Take(const std::string& line, uint64_t number) {
    const Options& limits = staging_.options();
    Result<ImportLine> parsed = ParseImportLine(line, now_);
    if (!parsed.ok()) return Refuse(number, parsed.status().message());
    if (auto* value = std::get_if<ExportedTableValue>(&*parsed)) {
      ExportedTableValue& v = *value;
      if (v.key.size() > limits.max_key_size || v.value.size() > limits.max_result_size) {
        return Refuse(number, fmt::format("key or value of table {} above the store's limits "
                                          "(max_key_size {}, max_result_size {})",
                                          v.table, limits.max_key_size, limits.max_result_size));
      }
      // Read even with --skip-existing: a bad table name or key is refused here, with its line.
      Result<TableValue> stored = (target_ ? *target_ : staging_).GetValue(v.table, v.key);
      if (!stored.ok()) {
        if (stored.status().code() == Status::Code::kInvalidArgument) {
          return Refuse(number, stored.status().message());
        }
        return ctx_.StoreError(args_.path, stored.status());
      }
      if (target_ && !args_.skip_existing && stored->version != 0) {
        return Refuse(number, fmt::format("key '{}' of table {} was written in the store already "
                                          "(--skip-existing leaves such values as they are)",
                                          DisplayEscape(v.key), v.table));
      }
      if (const int code = Repeated(v.table, v.key, number); code != kExitOk) return code;
      batch_bytes_ += line.size();
      ++batched_;
      value_batches_[v.table].push_back(
          {{std::move(v.key), TableValue{std::move(v.value), v.version}}, number});
      return kExitOk;
    }
    Record& record = std::get<Record>(*parsed);
    if (Status fits = CheckLimits(record, limits); !fits.ok()) {
      return Refuse(number, fits.message());
    }
    if (target_ && !args_.skip_existing) {
      Result<std::optional<Record>> stored = target_->Get(record.key);
      if (!stored.ok()) return ctx_.StoreError(args_.path, stored.status());
      if (stored->has_value()) {
        return Refuse(number, fmt::format("key '{}' is in the store already (--skip-existing "
                                          "leaves such records as they are)",
                                          DisplayEscape(record.key)));
      }
    }
    if (const int code = Repeated("", record.key, number); code != kExitOk) return code;
    batch_bytes_ += line.size();
    ++batched_;
    records_.push_back(std::move(record));
    record_lines_.push_back(number);
    return kExitOk;
  }

  int Flush() {
    if (!records_.empty()) {
      Result<std::vector<ImportOutcome>> outcomes = staging_.Import(records_);
      if (!outcomes.ok()) return ctx_.StoreError(args_.path, outcomes.status());
      for (std::size_t i = 0; i < outcomes->size(); ++i) {
        if ((*outcomes)[i] == ImportOutcome::kPresent) {
          return Refuse(record_lines_[i], fmt::format("key '{}' is also on an earlier line",
                                                      DisplayEscape(records_[i].key)));
        }
        imported += (*outcomes)[i] == ImportOutcome::kImported ? 1 : 0;
        expired += (*outcomes)[i] == ImportOutcome::kExpired ? 1 : 0;
      }
    }
    for (const auto& [table, entries] : value_batches_) {
      std::vector<std::pair<std::string, TableValue>> values;
      values.reserve(entries.size());
      for (const auto& entry : entries) values.push_back(entry.value);
      Result<std::vector<ImportOutcome>> outcomes = staging_.ImportValues(table, values);
      if (!outcomes.ok()) return ctx_.StoreError(args_.path, outcomes.status());
      for (std::size_t i = 0; i < outcomes->size(); ++i) {
        if ((*outcomes)[i] == ImportOutcome::kPresent) {
          return Refuse(entries[i].line,
                        fmt::format("key '{}' of table {} is also on an earlier line",
                                    DisplayEscape(entries[i].value.first), table));
        }
        ++values_imported;
      }
    }
    records_.clear();
    record_lines_.clear();
    value_batches_.clear();
    batch_lines_.clear();
    batched_ = 0;
    batch_bytes_ = 0;
    return kExitOk;
  }

  struct StagedValue {
    std::pair<std::string, TableValue> value;
    uint64_t line;
  };

  const Context& ctx_;
  const ImportArgs& args_;
  ImportInput& input_;
  Store& staging_;
  Store* const target_;
  // Every line's defaults (`created` absent) are this one moment.
  const TimePoint now_ = ctx_.Now();
  std::vector<Record> records_;
  std::vector<uint64_t> record_lines_;
  std::map<std::string, std::vector<StagedValue>> value_batches_;
  std::unordered_map<std::string, uint64_t> batch_lines_;  // table '\0' key -> its line
  std::size_t batched_ = 0, batch_bytes_ = 0;
  ProgressLine& progress_;
};

// The summary of an import that wrote what it was given.
void PrintImported(const Context& ctx, const ImportArgs& args, const CopyCounts& counts) {
  std::string sentence = fmt::format("imported {} records", counts.imported);
  if (counts.present > 0) {
    sentence += fmt::format("; {} left as they were (key in the store)", counts.present);
  }
  if (counts.expired > 0) {
    sentence += fmt::format("; {} not imported (retention passed)", counts.expired);
  }
  if (counts.values_imported > 0) {
    sentence += fmt::format("; {} table values", counts.values_imported);
  }
  if (counts.values_present > 0) {
    sentence += fmt::format("; {} table values left as they were (written in the store)",
                            counts.values_present);
  }
  Summary(ctx, args.path)
      .Count("records", counts.imported)
      .Count("present", counts.present)
      .Count("expired", counts.expired)
      .Count("table_values", counts.values_imported)
      .Count("table_values_present", counts.values_present)
      .Print(args.summary, sentence);
}

// Opens the store the import writes into.
Result<std::unique_ptr<Store>> OpenTarget(const Context& ctx, const std::string& path,
                                          const Options& options, int* code) {
  Result<std::unique_ptr<Store>> store = Store::Open(path, options);
  if (store.ok()) return store;
  const bool unfinished =
      !util::IsPostgresUri(path) && fs::exists(fs::path(path) / kUnfinishedImportFile);
  if (store.status().code() == Status::Code::kBusy && !unfinished) {
    *code = ctx.Fail(kExitStoreError,
                     fmt::format("store {} is in use ({}); import needs the store to itself: "
                                 "stop the applications that use it, or import into a new store",
                                 DisplayEscape(ctx.StoreName(path)), store.status().message()));
  } else if (store.status().code() ==
             Status::Code::kBusy) {  // the mark: its message says what to do
    *code = ctx.Fail(kExitStoreError, store.status().message());
  } else {
    *code = ctx.StoreError(path, store.status());
  }
  return store.status();
}

// --create where PATH has no store: the staging store is the new store, renamed into place.
int ImportIntoNewStore(const Context& ctx, const ImportArgs& args, const std::string& path,
                       Options options, ImportInput& input) {
  const std::string aside = path + kNewStoreSuffix;
  Result<std::unique_ptr<Store>> staging = OpenEmptyStaging(aside, options);
  if (!staging.ok()) return ctx.StoreError(aside, staging.status());
  ProgressLine progress(ctx.err, !args.summary.quiet && ctx.ErrIsTerminal());
  Stager stager(ctx, args, input, **staging, nullptr, progress);
  const int code = stager.Run();
  progress.Erase();
  staging->reset();  // closed: synced, its lock released
  Status installed = code == kExitOk ? InstallNewStore(aside, path) : Status::OK();
  if (code != kExitOk || !installed.ok()) {
    static_cast<void>(RemoveStaging(aside));  // a half-made store must not pass for one
    return code != kExitOk ? code : ctx.StoreError(path, installed);
  }
  PrintImported(ctx, args,
                CopyCounts{.imported = stager.imported,
                           .expired = stager.expired,
                           .values_imported = stager.values_imported});
  return ctx.FinishOutput(kExitOk);
}

// Writes the mark of an unfinished import into the store directory at `path` (an exit code).
int WriteUnfinishedMark(const Context& ctx, const std::string& path, const ImportInput& input) {
  const std::string mark = (fs::path(path) / kUnfinishedImportFile).string();
  return ctx.WriteFileAtomically(
      mark,
      fmt::format("An `idem import` of {} into this store, started at {} by process {}, is "
                  "not finished: the store may hold some of its records without their "
                  "table values, and is not opened until it is. The checked input is in "
                  "{}. Finish it with: idem import {} --finish\n",
                  input.Shown(), FormatRfc3339(ctx.Now()), ::getpid(), kStagingDirectory, path));
}

int ImportIntoStore(const Context& ctx, const ImportArgs& args, const std::string& path,
                    Options options, ImportInput& input) {
  int code = kExitOk;
  Result<std::unique_ptr<Store>> store = OpenTarget(ctx, path, options, &code);
  if (!store.ok()) return code;
  const Options& limits = (*store)->options();
  options.max_key_size = limits.max_key_size;
  options.max_label_size = limits.max_label_size;
  options.max_result_size = limits.max_result_size;
  Result<std::string> staging_path = StagingPath(path);
  if (!staging_path.ok()) return ctx.StoreError(path, staging_path.status());
  Result<std::unique_ptr<Store>> staging = OpenEmptyStaging(*staging_path, options);
  if (!staging.ok()) {
    if (util::IsPostgresUri(path)) RemoveStagingAndTemporary(path, *staging_path);
    return ctx.StoreError(*staging_path, staging.status());
  }
  ProgressLine progress(ctx.err, !args.summary.quiet && ctx.ErrIsTerminal());
  Stager stager(ctx, args, input, **staging, store->get(), progress);
  code = stager.Run();
  if (code != kExitOk) {
    staging->reset();
    RemoveStagingAndTemporary(path, *staging_path);
    return code;
  }
  // The whole input is checked and staged (durable: each staged batch was synced). From the
  // first write on, the store directory says it holds an unfinished import, until it is whole.
  // Why a mark rather than atomic batches: the format gives the records first, then the table
  // values table by table, with nothing linking a value to the record whose effect it is, so no
  // batch can hold "a record and its effects"; and a store with some of its records without
  // their effects answers retries wrongly. So the store refuses service while the mark is there,
  // and `idem import PATH --finish` copies the rest from the staging store beside it.
  if (!util::IsPostgresUri(path) && WriteUnfinishedMark(ctx, path, input) != kExitOk) {
    staging->reset();
    RemoveStagingAndTemporary(path, *staging_path);
    return kExitStoreError;
  }
  CopyCounts counts;
  Status copied =
      CopyStaged(**staging, **store, counts, progress, stager.imported + stager.values_imported);
  if (copied.ok() && !util::IsPostgresUri(path)) copied = RemoveUnfinishedMark(path);
  if (!copied.ok()) {
    if (util::IsPostgresUri(path)) {
      staging->reset();
      RemoveStagingAndTemporary(path, *staging_path);
      return ctx.Fail(kExitStoreError,
                      fmt::format("{} after {} records were imported; run the import again "
                                  "with --skip-existing once the cause is fixed",
                                  copied.ToString(), counts.imported));
    }
    return ctx.Fail(kExitStoreError,
                    fmt::format("{}; the import is not finished, and the store is marked so: "
                                "once the cause is fixed, finish it with: idem import {} --finish",
                                copied.ToString(), path));
  }
  staging->reset();
  RemoveStagingAndTemporary(path, *staging_path);
  counts.expired += stager.expired;
  PrintImported(ctx, args, counts);
  return ctx.FinishOutput(kExitOk);
}

// --finish: copies what an interrupted import left staged, then removes the mark.
int FinishImport(const Context& ctx, const std::string& path, Options options,
                 const SummaryArgs& summary) {
  if (util::IsPostgresUri(path)) {
    return ctx.Usage(
        "--finish is for a store directory: an import into PostgreSQL leaves no "
        "mark (run it again with --skip-existing)");
  }
  options.create_if_missing = false;
  options.open_unfinished_import = true;
  int code = kExitOk;
  Result<std::unique_ptr<Store>> store = OpenTarget(ctx, path, options, &code);
  if (!store.ok()) return code;
  if (!fs::exists(fs::path(path) / kUnfinishedImportFile)) {
    return ctx.Fail(kExitStoreError, fmt::format("store {} has no unfinished import (no {})",
                                                 DisplayEscape(path), kUnfinishedImportFile));
  }
  const std::string staging_path = (fs::path(path) / kStagingDirectory).string();
  options.open_unfinished_import = false;
  options.sharing = Sharing::kExclusive;
  Result<std::unique_ptr<Store>> staging = Store::Open(staging_path, options);
  if (!staging.ok()) return ctx.StoreError(staging_path, staging.status());
  CopyCounts counts;
  ProgressLine progress(ctx.err, !summary.quiet && ctx.ErrIsTerminal());
  Status copied = CopyStaged(**staging, **store, counts, progress, 0);
  if (copied.ok()) copied = RemoveUnfinishedMark(path);
  if (!copied.ok()) return ctx.StoreError(path, copied);
  staging->reset();
  static_cast<void>(RemoveStaging(staging_path));
  Summary(ctx, path)
      .Count("records", counts.imported)
      .Count("table_values", counts.values_imported)
      .Count("records_written_before", counts.present)
      .Count("table_values_written_before", counts.values_present)
      .Print(summary, fmt::format("finished the import: {} records and {} table values written "
                                  "now; {} records and {} table values were written before it "
                                  "stopped",
                                  counts.imported, counts.values_imported, counts.present,
                                  counts.values_present));
  return ctx.FinishOutput(kExitOk);
}

}  // namespace

int Import(const Context& ctx, const ImportArgs& args) {
  const std::string path =
      util::IsPostgresUri(args.path) ? args.path : StoreDirectoryPath(args.path);
  Options options = ctx.StoreOptions(/*read_only=*/false);
  // Nobody else may use a store directory meanwhile: the check of every key before the first
  // write stays true, and no application sees part of an import. (A store in PostgreSQL has no
  // owner to exclude others: a key an application takes meanwhile is left as it is.)
  options.sharing = Sharing::kExclusive;
  if (args.finish) return FinishImport(ctx, path, options, args.summary);
  options.create_if_missing = args.create;
  ImportInput input(args.input, LongestLine(options));
  if (!input.Open()) {
    return ctx.Fail(kExitStoreError,
                    fmt::format("cannot read {}: {}", input.Shown(), std::strerror(input.error())));
  }
  if (!util::IsPostgresUri(path) && args.create && IsNewStoreDirectory(path)) {
    return ImportIntoNewStore(ctx, args, path, options, input);
  }
  return ImportIntoStore(ctx, args, path, options, input);
}

}  // namespace idem::cli
