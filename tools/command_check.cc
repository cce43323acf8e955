// `idem check`: reads the whole store and says what is wrong with it (Store::Check), the
// equivalent of sqlite's `PRAGMA integrity_check` or `pg_amcheck`: after a disk fault, or before
// trusting a backup. A store that a process owns is checked through a backup its owner takes (the
// table files hard-linked: the same bytes), since only the process holding the files reads them.

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "commands.h"
#include "json_writer.h"
#include "text.h"
#include "util/escape.h"
#include "util/pg_uri.h"

namespace idem::cli {
namespace {

namespace fs = std::filesystem;

// Where the copy of a store that a process owns is made: in `scratch` when given, otherwise
// beside the store (on its file system, so that its table files are linked, not copied).
fs::path CopyPlace(const std::string& path, const std::string& scratch) {
  const fs::path store = fs::absolute(fs::path(path)).lexically_normal();
  const fs::path name = store.has_filename() ? store.filename() : store.parent_path().filename();
  const fs::path parent = scratch.empty()
                              ? (store.has_filename() ? store : store.parent_path()).parent_path()
                              : fs::path(scratch);
  return parent / fmt::format(".{}.check-{}", name.string(), getpid());
}

// The copy of a store, removed when the check is over.
struct Copy {
  fs::path path;
  ~Copy() {
    std::error_code ignored;
    if (!path.empty()) fs::remove_all(path, ignored);
  }
};

// One object a finding (PrintCheckFindingsJson), then one for the store.
void PrintJsonLines(const Context& ctx, const std::string& name, const CheckReport& report,
                    bool through_copy) {
  PrintCheckFindingsJson(ctx, report);
  std::string text;
  JsonWriter json(text);
  json.BeginObject();
  json.Key("store");
  json.String(name);
  json.Key("clean");
  json.Bool(report.clean());
  json.Key("problems");
  json.Number(report.findings.size() + report.findings_left_out);
  for (const auto& [key, value] : {std::pair<const char*, uint64_t>{"files", report.files},
                                   {"records", report.records},
                                   {"index_entries", report.index_entries},
                                   {"table_values", report.table_values},
                                   {"took_ms", static_cast<uint64_t>(report.took.count())}}) {
    json.Key(key);
    json.Number(value);
  }
  json.Key("checked_a_copy");
  json.Bool(through_copy);
  json.EndObject();
  text += '\n';
  ctx.out << text;
}

}  // namespace

void PrintCheckFindingsJson(const Context& ctx, const CheckReport& report) {
  std::string text;
  for (const CheckFinding& finding : report.findings) {
    JsonWriter json(text);
    json.BeginObject();
    json.Key("part");
    json.String(finding.part);
    json.Key("subject");
    json.String(finding.subject);
    json.Key("problem");
    json.String(finding.problem);
    json.EndObject();
    text += '\n';
  }
  ctx.out << text;
}

void PrintCheckTable(const Context& ctx, const std::string& name, const CheckReport& report,
                     std::string_view note) {
  const uint64_t problems = report.findings.size() + report.findings_left_out;
  fmt::print(ctx.out,
             "store {}: {} ({} table files, {} records, {} index entries, {} table values read "
             "in {} ms{})\n",
             DisplayEscape(name),
             report.clean() ? "clean"
                            : fmt::format("{} problem{} found", problems, problems == 1 ? "" : "s"),
             report.files, report.records, report.index_entries, report.table_values,
             report.took.count(), note);
  for (const CheckFinding& finding : report.findings) {
    fmt::print(ctx.out, "  {} {}: {}\n", finding.part,
               finding.subject.empty() ? "-" : DisplayEscape(finding.subject),
               EscapeControls(finding.problem));
  }
  if (report.findings_left_out > 0) {
    fmt::print(ctx.out, "  and {} more\n", report.findings_left_out);
  }
}

int Check(const Context& ctx, const CheckArgs& args) {
  const std::string& path = args.path;
  const std::string format = ResolveFormat(ctx, args.format);
  auto store = ctx.OpenStore(path, /*read_only=*/true);
  if (!store.ok()) return ctx.StoreError(path, store.status());
  Result<CheckReport> report = (*store)->Check();
  Copy copy;
  if (report.status().code() == Status::Code::kBusy && !util::IsPostgresUri(path)) {
    // Another process owns the store: it takes a backup, which this one checks.
    copy.path = CopyPlace(path, args.scratch);
    const Status backed_up = (*store)->Backup(copy.path.string());
    if (!backed_up.ok()) {
      const std::string place = std::exchange(copy.path, {}).string();  // nothing was left there
      return ctx.Fail(kExitStoreError,
                      fmt::format("cannot check store {}: its owner could not back it up to {} "
                                  "to be checked (--scratch DIR picks another place): {}",
                                  DisplayEscape(ctx.StoreName(path)), DisplayEscape(place),
                                  backed_up.ToString()));
    }
    store->reset();
    auto copied = ctx.OpenStore(copy.path.string(), /*read_only=*/true);
    if (!copied.ok()) return ctx.StoreError(copy.path.string(), copied.status());
    report = (*copied)->Check();
  }
  if (!report.ok()) return ctx.StoreError(path, report.status());
  const std::string name = ctx.StoreName(path);
  if (format == "jsonl") {
    PrintJsonLines(ctx, name, *report, !copy.path.empty());
  } else {
    PrintCheckTable(ctx, name, *report,
                    copy.path.empty() ? "" : ", a backup its owner took just now");
  }
  return ctx.FinishOutput(report->clean() ? kExitOk : kExitProblemsFound);
}

}  // namespace idem::cli
