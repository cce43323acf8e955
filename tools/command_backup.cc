// `idem backup`: a consistent copy of a store while applications use it, taken by the store's
// owner (or by this command when no process owns the store).

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "commands.h"
#include "summary.h"
#include "text.h"
#include "util/escape.h"

namespace idem::cli {

int Backup(const Context& ctx, const BackupArgs& args) {
  const std::string& path = args.path;
  // Said before connecting: a server that cannot be reached would hide the advice.
  if (path.starts_with("postgresql://") || path.starts_with("postgres://")) {
    return ctx.Fail(kExitUsage,
                    fmt::format("store {} is kept in PostgreSQL: back up its tables with "
                                "PostgreSQL's own tools (pg_dump --table, or the server's base "
                                "backups); idem backup copies store directories. 'idem export' "
                                "writes its records as JSON Lines",
                                DisplayStoreName(path)));
  }
  if (args.destination.empty()) return ctx.Usage("DEST is empty");
  // Writable: when no process owns the store, this one becomes its owner for the copy (a
  // read-only instance cannot flush). No record is changed.
  auto store = ctx.OpenStore(path, /*read_only=*/false);
  if (!store.ok()) return ctx.StoreError(path, store.status());
  const Status backed_up = (*store)->Backup(args.destination);
  if (!backed_up.ok()) {
    if (backed_up.code() == Status::Code::kInvalidArgument) {
      return ctx.Fail(kExitStoreError, backed_up.message());
    }
    return ctx.Fail(
        kExitStoreError,
        fmt::format("cannot back up store {} to {}: {}", DisplayEscape(ctx.StoreName(path)),
                    DisplayEscape(args.destination), backed_up.ToString()));
  }
  store->reset();
  Summary summary(ctx, path);
  summary.Text("destination", args.destination).Flag("verified", args.verify);
  const std::string sentence = fmt::format("backed up {} to {}", DisplayEscape(ctx.StoreName(path)),
                                           DisplayEscape(args.destination));
  if (!args.verify) {
    summary.Print(args.summary, sentence);
    return ctx.FinishOutput(kExitOk);
  }
  // No process owns the new copy: this one reads its files.
  auto copy = ctx.OpenStore(args.destination, /*read_only=*/true);
  if (!copy.ok()) return ctx.StoreError(args.destination, copy.status());
  const Result<CheckReport> report = (*copy)->Check();
  if (!report.ok()) return ctx.StoreError(args.destination, report.status());
  if (args.summary.format == kSummaryJson) {
    // The findings as `idem check --format jsonl` writes them, then the summary.
    PrintCheckFindingsJson(ctx, *report);
    summary.Flag("clean", report->clean())
        .Count("problems", report->findings.size() + report->findings_left_out)
        .Print(args.summary, sentence);
  } else {
    summary.Print(args.summary, sentence);
    if (!args.summary.quiet || !report->clean()) {
      PrintCheckTable(ctx, args.destination, *report, "");
    }
  }
  return ctx.FinishOutput(report->clean() ? kExitOk : kExitProblemsFound);
}

}  // namespace idem::cli
