// `idem get`: one record, as its fields or one JSON object.

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "commands.h"
#include "records.h"
#include "text.h"

namespace idem::cli {

int Get(const Context& ctx, const GetArgs& args) {
  const std::string& path = args.path;
  const std::optional<std::string> key = KeyArgument(ctx, args.key, args.hex_key);
  if (!key) return kExitUsage;
  auto store = ctx.OpenStore(path, /*read_only=*/true);
  if (!store.ok()) return ctx.StoreError(path, store.status());
  auto record = (*store)->Get(*key);
  if (!record.ok()) {
    if (record.status().code() == Status::Code::kInvalidArgument) {
      return ctx.Usage(record.status().message());
    }
    return ctx.StoreError(path, record.status());
  }
  if (!record->has_value()) {
    return ctx.Fail(kExitNotFound, fmt::format("no record for key '{}'", DisplayEscape(*key)));
  }
  if (ResolveFormat(ctx, args.format) == "table") {
    WriteRecordFields(ctx.out, **record);
  } else {
    fmt::print(ctx.out, "{}\n", RecordToJson(**record));
  }
  return ctx.FinishOutput(kExitOk);
}

}  // namespace idem::cli
