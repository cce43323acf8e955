#include "core/open_options.h"

#include <fmt/format.h>

namespace idem::core {

using std::chrono::milliseconds;

Status CheckDuration(std::string_view what, milliseconds duration) {
  if (duration >= milliseconds(0)) return Status::OK();
  return Status::InvalidArgument(
      fmt::format("{} is {} ms; it must not be negative", what, duration.count()));
}

Status CheckOptions(const Options& options) {
  if (options.default_lease <= milliseconds(0)) {
    return Status::InvalidArgument("default_lease must be positive");
  }
  if (options.default_retention <= milliseconds(0)) {
    return Status::InvalidArgument("default_retention must be positive");
  }
  if (options.max_key_size == 0) return Status::InvalidArgument("max_key_size must be positive");
  IDEM_RETURN_IF_ERROR(CheckDuration("execute_wait", options.execute_wait));
  IDEM_RETURN_IF_ERROR(CheckDuration("failover_timeout", options.failover_timeout));
  IDEM_RETURN_IF_ERROR(CheckDuration("renewal_grace", options.renewal_grace));
  if (options.request_timeout <= milliseconds(0)) {
    return Status::InvalidArgument("request_timeout must be positive");
  }
  if (options.sync_interval <= milliseconds(0)) {
    return Status::InvalidArgument(
        fmt::format("sync_interval is {} ms; it must be positive", options.sync_interval.count()));
  }
  // Checked for every store, as the rest, though only a store in PostgreSQL has a pool: an
  // option that cannot be right is refused wherever it is given.
  if (options.pool_size <= 0) return Status::InvalidArgument("pool_size must be positive");
  IDEM_RETURN_IF_ERROR(CheckDuration("reverify_interval", options.reverify_interval));
  return CheckDuration("auto_purge_interval", options.auto_purge_interval);
}

std::vector<std::string> DifferencesFromTheFirstOpen(const Options& first, const Options& later) {
  std::vector<std::string> differences;
  auto compare = [&](std::string_view name, const auto& kept, const auto& asked) {
    if (kept != asked)
      differences.push_back(fmt::format("{} {} (this Open asked {})", name, kept, asked));
  };
  auto compare_ms = [&](std::string_view name, milliseconds kept, milliseconds asked) {
    compare(name, fmt::format("{} ms", kept.count()), fmt::format("{} ms", asked.count()));
  };
  compare("sharing", first.sharing == Sharing::kAuto ? "kAuto" : "kExclusive",
          later.sharing == Sharing::kAuto ? "kAuto" : "kExclusive");
  compare("max_key_size", first.max_key_size, later.max_key_size);
  compare("max_result_size", first.max_result_size, later.max_result_size);
  compare("max_label_size", first.max_label_size, later.max_label_size);
  compare("pool_size", first.pool_size, later.pool_size);
  compare("memory_budget", first.memory_budget, later.memory_budget);
  compare("max_disk_bytes", first.max_disk_bytes, later.max_disk_bytes);
  compare("take_over_dead_holders", first.take_over_dead_holders, later.take_over_dead_holders);
  compare_ms("auto_purge_interval", first.auto_purge_interval, later.auto_purge_interval);
  compare_ms("reverify_interval", first.reverify_interval, later.reverify_interval);
  compare_ms("renewal_grace", first.renewal_grace, later.renewal_grace);
  compare_ms("sync_interval", first.sync_interval, later.sync_interval);
  compare_ms("failover_timeout", first.failover_timeout, later.failover_timeout);
  compare_ms("request_timeout", first.request_timeout, later.request_timeout);
  if (first.clock != later.clock) differences.push_back("clock (this Open passed another Clock)");
  return differences;
}

}  // namespace idem::core
