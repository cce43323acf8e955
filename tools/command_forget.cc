// `idem forget`: removes one record whatever its state.

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "commands.h"
#include "text.h"
#include "util/escape.h"

namespace idem::cli {

int Forget(const Context& ctx, const ForgetArgs& args) {
  const std::string& path = args.path;
  const std::optional<std::string> key = KeyArgument(ctx, args.key, args.hex_key);
  if (!key) return kExitUsage;
  auto store = ctx.OpenStore(path, /*read_only=*/false);
  if (!store.ok()) return ctx.StoreError(path, store.status());
  const Status forgotten = (*store)->Forget(*key);
  if (forgotten.code() == Status::Code::kNotFound) {
    return ctx.Fail(kExitNotFound, fmt::format("no record for key '{}'", DisplayEscape(*key)));
  }
  if (forgotten.code() == Status::Code::kInvalidArgument) {
    return ctx.Usage(forgotten.message());
  }
  if (!forgotten.ok()) return ctx.StoreError(path, forgotten);
  store->reset();
  fmt::print(ctx.out, "forgot {}\n", DisplayEscape(*key));
  return ctx.FinishOutput(kExitOk);
}

}  // namespace idem::cli
