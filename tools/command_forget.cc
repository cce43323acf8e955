// `idem forget`: removes one record whatever its state, the records a selection matches (each
// only if it is still as listed: Store::ForgetIfUnchanged), or the keys a file lists; all in one
// process, for repairs of thousands of records.

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <cstring>

#include "commands.h"
#include "import_input.h"
#include "records.h"
#include "summary.h"
#include "text.h"
#include "util/escape.h"
#include "util/hex.h"

namespace idem::cli {
namespace {

// What a bulk forget did: removed (or, in a dry run, would remove), and kept because the record
// changed or went between its listing and its removal (or, for a listed key, had none).
struct Tally {
  uint64_t forgotten = 0;
  uint64_t kept = 0;
};

bool SelectionGiven(const ForgetArgs& args) {
  return !args.state.empty() || args.has_type || !args.prefix.empty() || args.age.count() > 0;
}

// The summary: `sentence`, or its figures; `finished` false when an error or a bad line stopped
// a bulk forget part way.
void Summarize(const Context& ctx, const ForgetArgs& args, const Tally& tally, bool finished,
               std::string_view sentence) {
  Summary(ctx, args.path)
      .Flag("dry_run", args.dry_run)
      .Count("forgotten", tally.forgotten)
      .Count("kept", tally.kept)
      .Flag("finished", finished)
      .Print(args.summary, sentence);
}

// The summary of a whole bulk forget, and exit 1 when nothing was removed.
int Report(const Context& ctx, const ForgetArgs& args, const Tally& tally,
           std::string_view kept_why) {
  std::string sentence =
      fmt::format("{} {} records", args.dry_run ? "would forget" : "forgot", tally.forgotten);
  if (tally.kept > 0) sentence += fmt::format(" ({} {})", tally.kept, kept_why);
  Summarize(ctx, args, tally, /*finished=*/true, sentence);
  return ctx.FinishOutput(tally.forgotten == 0 ? kExitNotFound : kExitOk);
}

// The records a selection matches, each forgotten only if it is still as listed.
int ForgetSelected(const Context& ctx, const ForgetArgs& args, Store& store) {
  const auto now = ctx.Now();
  Tally tally;
  Status failed;
  ScanOptions scan;
  scan.prefix = args.prefix;
  const Status scanned = store.Scan(scan, [&](const Record& record) {
    if (!args.state.empty() && DisplayState(record) != args.state) return true;
    if (args.has_type && record.type != args.type) return true;
    if (args.age.count() > 0 && record.updated > now - args.age) return true;
    if (args.dry_run) {
      ++tally.forgotten;
      return true;
    }
    const Status forgotten = store.ForgetIfUnchanged(record);
    if (forgotten.ok()) {
      ++tally.forgotten;
    } else if (forgotten.code() == Status::Code::kConflict ||
               forgotten.code() == Status::Code::kNotFound) {
      ++tally.kept;
    } else {
      failed = forgotten;
      return false;
    }
    return true;
  });
  if (!failed.ok() || !scanned.ok()) {
    Summarize(ctx, args, tally, /*finished=*/false,
              fmt::format("forgot {} records before the error", tally.forgotten));
    return ctx.StoreError(args.path, failed.ok() ? scanned : failed);
  }
  return Report(ctx, args, tally, "changed since listed: kept");
}

// Forgets `key` (in a dry run, looks it up): whether it had a record.
Result<bool> ForgetKey(Store& store, const std::string& key, bool dry_run) {
  if (dry_run) {
    IDEM_ASSIGN_OR_RETURN(const std::optional<Record> found, store.Get(key));
    return found.has_value();
  }
  const Status forgotten = store.Forget(key);
  if (forgotten.code() == Status::Code::kNotFound) return false;
  IDEM_RETURN_IF_ERROR(forgotten);
  return true;
}

// The keys of --keys-from, one a line (hex with --hex-key), whatever their records hold.
int ForgetListed(const Context& ctx, const ForgetArgs& args, Store& store) {
  const Options& limits = store.options();
  ImportInput input(args.keys_from, 2 * limits.max_key_size + 2);
  if (!input.Open()) {
    return ctx.Usage(
        fmt::format("cannot open {}: {}", input.Shown(), std::strerror(input.error())));
  }
  Tally tally;
  std::string line;
  uint64_t number = 0;
  for (;;) {
    const ImportInput::Read read = input.Next(line, number);
    if (read == ImportInput::Read::kEnd) break;
    if (read == ImportInput::Read::kError) {
      Summarize(ctx, args, tally, /*finished=*/false,
                fmt::format("forgot {} records before the error", tally.forgotten));
      return ctx.Fail(kExitStoreError, fmt::format("cannot read {}: {}", input.Shown(),
                                                   std::strerror(input.error())));
    }
    std::optional<std::string> key;
    if (read == ImportInput::Read::kLine) {
      key = args.hex_key ? util::FromHex(line) : std::optional<std::string>(line);
    }
    if (!key) {
      Summarize(ctx, args, tally, /*finished=*/false,
                fmt::format("forgot {} records before line {}", tally.forgotten, number));
      return ctx.Usage(fmt::format(
          "{} line {}: {}", input.Shown(), number,
          read == ImportInput::Read::kTooLong
              ? fmt::format("longer than any key (max_key_size {} bytes)", limits.max_key_size)
              : std::string("not hex (pairs of digits 0-9, a-f)")));
    }
    const Result<bool> forgotten = ForgetKey(store, *key, args.dry_run);
    if (!forgotten.ok()) {
      Summarize(ctx, args, tally, /*finished=*/false,
                fmt::format("forgot {} records before line {}", tally.forgotten, number));
      if (forgotten.status().code() == Status::Code::kInvalidArgument) {
        return ctx.Usage(
            fmt::format("{} line {}: {}", input.Shown(), number, forgotten.status().message()));
      }
      return ctx.StoreError(args.path, forgotten.status());
    }
    ++(*forgotten ? tally.forgotten : tally.kept);
  }
  return Report(ctx, args, tally, "listed keys had none");
}

}  // namespace

int Forget(const Context& ctx, const ForgetArgs& args) {
  const std::string& path = args.path;
  const bool bulk = SelectionGiven(args) || !args.keys_from.empty();
  if (args.key.empty() == !bulk) {
    return ctx.Usage(
        args.key.empty()
            ? "give a KEY, a selection (--state, --type, --prefix, --older-than) or --keys-from"
            : "give a KEY, or a selection or --keys-from, not both");
  }
  if (SelectionGiven(args) && !args.keys_from.empty()) {
    return ctx.Usage("--keys-from removes the keys it lists; it takes no selection");
  }
  if (!bulk && args.dry_run) return ctx.Usage("--dry-run is for a selection or --keys-from");
  std::optional<std::string> key;
  if (!bulk) {
    key = KeyArgument(ctx, args.key, args.hex_key);
    if (!key) return kExitUsage;
  }
  auto store = ctx.OpenStore(path, /*read_only=*/false);
  if (!store.ok()) return ctx.StoreError(path, store.status());
  if (SelectionGiven(args)) return ForgetSelected(ctx, args, **store);
  if (bulk) return ForgetListed(ctx, args, **store);
  const Status forgotten = (*store)->Forget(*key);
  if (forgotten.code() == Status::Code::kNotFound) {
    return ctx.Fail(kExitNotFound, fmt::format("no record for key '{}'", DisplayEscape(*key)));
  }
  if (forgotten.code() == Status::Code::kInvalidArgument) {
    return ctx.Usage(forgotten.message());
  }
  if (!forgotten.ok()) return ctx.StoreError(path, forgotten);
  store->reset();
  Summary(ctx, path)
      .Text("key", *key)
      .Flag("dry_run", false)
      .Count("forgotten", 1)
      .Count("kept", 0)
      .Flag("finished", true)
      .Print(args.summary, fmt::format("forgot {}", DisplayEscape(*key)));
  return ctx.FinishOutput(kExitOk);
}

}  // namespace idem::cli
