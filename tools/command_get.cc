// `idem get`: one record, as its fields or one JSON object.

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "commands.h"
#include "records.h"
#include "text.h"
#include "util/escape.h"

namespace idem::cli {

int Get(const Context& ctx, const GetArgs& args) {
  const std::string& path = args.path;
  const std::optional<std::string> key = KeyArgument(ctx, args.key, args.hex_key);
  if (!key) return kExitUsage;
  auto store = ctx.OpenStore(path, /*read_only=*/true);
  if (!store.ok()) return ctx.StoreError(path, store.status());
  if (!args.app_table.empty()) {
    // `idem get PATH --table NAME KEY`: a key of an application table.
    auto value = (*store)->GetValue(args.app_table, *key);
    if (!value.ok()) {
      if (value.status().code() == Status::Code::kInvalidArgument) {
        return ctx.Usage(value.status().message());
      }
      return ctx.StoreError(path, value.status());
    }
    if (!value->value) {
      return ctx.Fail(kExitNotFound, fmt::format("no value for key '{}' in table {}",
                                                 DisplayEscape(*key), args.app_table));
    }
    if (ResolveFormat(ctx, args.format) == "table") {
      fmt::print(ctx.out, "key      {}\nversion  {}\nvalue    {}\n", DisplayEscape(*key),
                 value->version, DisplayEscape(*value->value));
    } else {
      fmt::print(ctx.out, "{}\n", TableValueToJson(*key, *value));
    }
    return ctx.FinishOutput(kExitOk);
  }
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
