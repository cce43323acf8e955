// `idem purge`: removes (or counts) the records whose retention has expired.

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <chrono>

#include "commands.h"
#include "text.h"

namespace idem::cli {

int Purge(const Context& ctx, const PurgeArgs& args) {
  const std::string& path = args.path;
  const bool dry_run = args.dry_run;
  const bool quiet = args.quiet;
  // A dry run only reads: it never writes nor takes the store from its owner.
  auto store = ctx.OpenStore(path, /*read_only=*/dry_run);
  if (!store.ok()) return ctx.StoreError(path, store.status());
  // On a terminal, say what is going on, with the running count when this process does the
  // purge itself (through another owner the count arrives at the end).
  const bool progress = !quiet && ctx.ErrIsTerminal();
  const char* verb = dry_run ? "counted" : "removed";
  auto last_shown = std::chrono::steady_clock::now();
  PurgeOptions options;
  options.dry_run = dry_run;
  options.compact = !dry_run;
  if (progress) {
    fmt::print(ctx.err, "idem purge: {} expired records in {} ...",
               dry_run ? "counting" : "removing", DisplayEscape(path));
    ctx.err.flush();
    options.progress = [&](uint64_t so_far) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last_shown < std::chrono::milliseconds(200)) return;
      last_shown = now;
      fmt::print(ctx.err, "\r\033[Kidem purge: {} {} expired records so far ...", verb, so_far);
      ctx.err.flush();
    };
  }
  auto purged = (*store)->Purge(options);
  if (progress) ctx.err << "\r\033[K" << std::flush;
  if (!purged.ok()) return ctx.StoreError(path, purged.status());
  store->reset();
  if (!quiet) {
    fmt::print(ctx.out, "{} {} records\n", dry_run ? "would purge" : "purged", *purged);
  }
  return ctx.FinishOutput(kExitOk);
}

}  // namespace idem::cli
