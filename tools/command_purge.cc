// `idem purge`: removes (or counts) the records whose retention has expired.

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "commands.h"
#include "progress_line.h"
#include "summary.h"
#include "text.h"
#include "util/escape.h"

namespace idem::cli {

int Purge(const Context& ctx, const PurgeArgs& args) {
  const std::string& path = args.path;
  const bool dry_run = args.dry_run;
  // A dry run only reads: it never writes nor takes the store from its owner.
  auto store = ctx.OpenStore(path, /*read_only=*/dry_run);
  if (!store.ok()) return ctx.StoreError(path, store.status());
  // On a terminal, say what is going on: the running count, of how many (the due entries of the
  // expiry index, counted first) and the percentage. Through another owner they arrive about
  // once a second.
  ProgressLine progress(ctx.err, !args.summary.quiet && ctx.ErrIsTerminal());
  const char* verb = dry_run ? "counted" : "removed";
  std::optional<uint64_t> total;
  int last_percent = -1;
  PurgeOptions options;
  options.dry_run = dry_run;
  options.compact = !dry_run;
  if (progress.shown()) {
    progress.Show(fmt::format("idem purge: {} expired records in {} ...",
                              dry_run ? "counting" : "removing",
                              DisplayEscape(ctx.StoreName(path))));
    options.progress_total = [&](uint64_t expected) {
      total = expected;
      options.progress(0);
    };
    options.progress = [&](uint64_t so_far) {
      if (total) {
        // A line per percent: at most 101 lines whatever the size of the purge. A record
        // rewritten since its index entry was written is not purged: the count may end short of
        // the total; in PostgreSQL rows expiring meanwhile are purged too: above it (capped).
        const int percent =
            *total == 0 ? 100 : static_cast<int>(std::min<uint64_t>(so_far, *total) * 100 / *total);
        if (percent == last_percent) return;
        last_percent = percent;
        progress.Show(fmt::format("idem purge: {} {} of {} expired records ({}%) ...", verb, so_far,
                                  *total, percent));
      } else if (progress.Due()) {
        progress.Show(fmt::format("idem purge: {} {} expired records so far ...", verb, so_far));
      }
    };
  }
  auto purged = (*store)->Purge(options);
  progress.Erase();
  if (!purged.ok()) return ctx.StoreError(path, purged.status());
  store->reset();
  Summary(ctx, path)
      .Flag("dry_run", dry_run)
      .Count("records", *purged)
      .Print(args.summary,
             fmt::format("{} {} records", dry_run ? "would purge" : "purged", *purged));
  return ctx.FinishOutput(kExitOk);
}

}  // namespace idem::cli
