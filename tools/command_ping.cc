// `idem ping`: whether the store answers a read, within --timeout, for health checks and
// watchdogs (the equivalent of pg_isready or redis-cli ping).

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <chrono>

#include "commands.h"
#include "records.h"
#include "text.h"
#include "util/escape.h"
#include "util/pg_uri.h"

namespace idem::cli {
namespace {

// Who answered, for the success line.
std::string Answerer(const Context& ctx, const std::string& path, const StoreHealth& health) {
  if (util::IsPostgresUri(path)) return "its server";
  if (!health.owner_live) return "its files (no process owns it)";
  return fmt::format("its owner, pid {}, since {} ({} ago)", health.owner_pid,
                     FormatLocalTime(health.owner_since), HumanAge(ctx.Now() - health.owner_since));
}

}  // namespace

int Ping(const Context& ctx, const PingArgs& args) {
  const std::string& path = args.path;
  const auto start = std::chrono::steady_clock::now();
  const auto unanswered = [&](const Status& status) {
    return ctx.Fail(kExitOwnerUnreachable,
                    fmt::format("store {} did not answer: {}", DisplayEscape(ctx.StoreName(path)),
                                status.ToString()));
  };
  auto store = ctx.OpenStore(path, /*read_only=*/true);
  if (!store.ok()) {
    if (OwnerNotAsked(store.status())) return unanswered(store.status());
    return ctx.StoreError(path, store.status());
  }
  // Store::Health reads one key (kHealthProbeKey) and names the owner that answered.
  const StoreHealth health = (*store)->Health();
  if (!health.can_read) {
    if (OwnerNotAsked(health.problem)) return unanswered(health.problem);
    return ctx.StoreError(path, health.problem);
  }
  // It answers, but its owner found a damaged table file: an operator must restore it.
  if (health.problem.code() == Status::Code::kCorruption)
    return ctx.StoreError(path, health.problem);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  if (args.quiet) return kExitOk;
  fmt::print(ctx.out, "store {} answered a read in {} ms: {}\n", DisplayEscape(ctx.StoreName(path)),
             took.count(), Answerer(ctx, path, health));
  return ctx.FinishOutput(kExitOk);
}

}  // namespace idem::cli
