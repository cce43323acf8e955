// `idem dump`: records in key order, filtered, as a table or JSON Lines.

#include "commands.h"
#include "records.h"

namespace idem::cli {
namespace {

// `idem dump PATH --table NAME`: an application table's keys, versions and values, in key order.
int DumpAppTable(const Context& ctx, const DumpArgs& args) {
  if (!args.state.empty() || args.has_type) {
    return ctx.Usage(
        "--state and --type select records; an application table has keys, values "
        "and versions");
  }
  auto store = ctx.OpenStore(args.path, /*read_only=*/true);
  if (!store.ok()) return ctx.StoreError(args.path, store.status());
  const bool table = ResolveFormat(ctx, args.format) == "table";
  if (table) ctx.out << "KEY  VERSION  VALUE\n";
  uint64_t listed = 0;
  ScanOptions scan;
  scan.prefix = args.prefix;
  const Status scanned =
      (*store)->ScanTable(args.app_table, scan, [&](std::string_view key, const TableValue& value) {
        ++listed;
        ctx.out << (table ? TableValueLine(key, value) : TableValueToJson(key, value)) << '\n';
        if (!ctx.out.good()) return false;  // the reader went away (| head)
        return args.limit == 0 || listed < static_cast<uint64_t>(args.limit);
      });
  if (!scanned.ok()) {
    ctx.out.flush();
    if (scanned.code() == Status::Code::kInvalidArgument) return ctx.Usage(scanned.message());
    return ctx.StoreError(args.path, scanned);
  }
  return ctx.FinishOutput(listed == 0 ? kExitNotFound : kExitOk);
}

}  // namespace

int Dump(const Context& ctx, const DumpArgs& args) {
  if (!args.app_table.empty()) return DumpAppTable(ctx, args);
  auto store = ctx.OpenStore(args.path, /*read_only=*/true);
  if (!store.ok()) return ctx.StoreError(args.path, store.status());

  const bool table = ResolveFormat(ctx, args.format) == "table";
  RecordTable records_table(ctx.out);
  uint64_t listed = 0;
  std::string line;
  ScanOptions scan;
  scan.prefix = args.prefix;
  const Status scanned = (*store)->Scan(scan, [&](const Record& record) {
    if (!args.state.empty() && DisplayState(record) != args.state) return true;
    if (args.has_type && record.type != args.type) return true;
    ++listed;
    if (table) {
      records_table.Add(record);
    } else {
      line = RecordToJson(record);
      line += '\n';
      ctx.out << line;
    }
    if (!ctx.out.good()) return false;  // the reader went away (| head)
    return args.limit == 0 || listed < static_cast<uint64_t>(args.limit);
  });
  if (table) records_table.Flush();
  if (!scanned.ok()) {
    ctx.out.flush();
    return ctx.StoreError(args.path, scanned);
  }
  return ctx.FinishOutput(listed == 0 ? kExitNotFound : kExitOk);
}

}  // namespace idem::cli
