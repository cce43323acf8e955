// `idem export`: every record with every field, and every application table value, as of one
// moment, as JSON Lines that `idem import` reads back.

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <optional>

#include "commands.h"
#include "export_format.h"
#include "progress_line.h"
#include "summary.h"
#include "text.h"
#include "util/escape.h"

namespace idem::cli {

int Export(const Context& ctx, const ExportArgs& args) {
  // Opened first: no output file is made for a store that cannot be read.
  auto store = ctx.OpenStore(args.path, /*read_only=*/true);
  if (!store.ok()) return ctx.StoreError(args.path, store.status());
  // The records are the store's: the file is as private as the store (0600).
  std::optional<AtomicFile> file;
  if (!args.output.empty()) {
    file.emplace(ctx, args.output, 0600);
    if (const int opened = file->Open(); opened != kExitOk) return opened;
  }
  uint64_t exported = 0, values = 0;
  // On a terminal, while the lines go to a file or a pipe: how many are written so far.
  ProgressLine progress(
      ctx.err, !args.summary.quiet && ctx.ErrIsTerminal() && (file || !ctx.OutIsTerminal()));
  std::string line;
  const auto emit = [&]() {
    if ((exported + values) % 1024 == 1 && progress.Due()) {
      progress.Show(
          fmt::format("idem export: {} records and {} table values written ...", exported, values));
    }
    line += '\n';
    if (file) {
      file->Write(line);
      return true;
    }
    ctx.out << line;
    return ctx.out.good();  // the reader went away (| head)
  };
  // Records, then the application tables' values table by table in key order (deleted keys,
  // which keep only a version, are left out), all as of one moment (Store::ScanSnapshot): an
  // export of a store in use holds each record's Complete with its table writes, or neither.
  const Status scanned = (*store)->ScanSnapshot(
      [&](const Record& record) {
        line = RecordToExportJson(record);
        ++exported;
        return emit();
      },
      [&](std::string_view table, std::string_view key, const TableValue& value) {
        line = TableValueToExportJson(table, key, value);
        ++values;
        return emit();
      });
  progress.Erase();
  if (!scanned.ok()) {
    ctx.out.flush();
    return ctx.StoreError(args.path, scanned);
  }
  if (!file) return ctx.FinishOutput(kExitOk);
  if (const int committed = file->Commit(); committed != kExitOk) return committed;
  Summary(ctx, args.path)
      .Count("records", exported)
      .Count("table_values", values)
      .Text("output", args.output)
      .Print(args.summary,
             fmt::format("exported {} records{} to {}", exported,
                         values > 0 ? fmt::format(" and {} table values", values) : "",
                         DisplayEscape(args.output)));
  return ctx.FinishOutput(kExitOk);
}

}  // namespace idem::cli
