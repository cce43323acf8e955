// Application tables: the application's own state (a balance, an inventory count, a device's
// counters) kept in the store beside the records, and written only together with a record's
// Complete, in the same atomic write, with the same durability and the same fence
// (docs/semantics.md, "Exactly-once effects"). So a crash between "state written" and "record
// completed" cannot happen: both are written or neither, and a holder whose lease was taken over
// writes nothing.
//
//   IDEM_ASSIGN_OR_RETURN(idem::TableValue balance, store->GetValue("balances", account));
//   idem::WriteSet writes;
//   writes.Put("balances", account, Add(balance.value, amount), balance.version);
//   idem::Status done = store->Complete(message_id, claim.token, "ok", writes);
//   // kConflict: another commit changed the balance since it was read; nothing was written and
//   // the claim is still this caller's: read again and Complete again with the same token.
//
// A table is made the first time a write names it; reading one that was never written finds
// every key absent. Tables are kept in store directories; a store in PostgreSQL keeps the
// application's state in the application's own tables instead.

#ifndef IDEM_TABLES_H_
#define IDEM_TABLES_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "idem/export.h"

namespace idem {

// A key of an application table as read: its value and its version.
struct TableValue {
  std::optional<std::string> value;  // nullopt: absent (never written, or deleted)
  // 0 while the key was never written; raised by every write of the key, a Delete included, so
  // a version is never seen twice for one key. At most kLargestVersion: a key there takes no
  // more writes (kInvalidArgument), rather than wrap to 0, where "never written" would match.
  uint64_t version = 0;
  static constexpr uint64_t kLargestVersion = (uint64_t{1} << 63) - 1;

  friend bool operator==(const TableValue&, const TableValue&) = default;
};

// Writes to application tables, staged to be applied with a record's Complete. A write may be
// conditional: applied only if the key is still at the version the caller read (the optimistic
// lock of `UPDATE ... WHERE version = ?`); if any conditional write's key changed, the Complete
// applies nothing and returns kConflict. An unconditional write (a blind write) suits keys that
// only this request writes. A key the request read but does not write can be required to be
// unchanged too (Require): with every key it read so required, the Complete commits only if
// nothing it read has changed, so requests are serializable (docs/semantics.md, "Isolation").
class IDEM_EXPORT WriteSet {
 public:
  struct Write {
    std::string table;
    std::string key;
    std::optional<std::string> value;    // nullopt: delete the key
    std::optional<uint64_t> if_version;  // nullopt: unconditional
  };
  // A key that is not written but must still be at `version` when the Complete applies.
  struct Requirement {
    std::string table;
    std::string key;
    uint64_t version = 0;  // 0: still never written
  };

  // Sets `key` of `table` to `value`; when `if_version` is given, only if the key is still at
  // that version (0: still never written) when the Complete applies.
  void Put(std::string_view table, std::string_view key, std::string_view value,
           std::optional<uint64_t> if_version = std::nullopt);
  // Deletes `key` of `table` (its version still rises), under the same condition.
  void Delete(std::string_view table, std::string_view key,
              std::optional<uint64_t> if_version = std::nullopt);
  // Writes nothing to `key` of `table`, but applies the Complete (and every write with it) only
  // if the key is still at `version` (0: still never written): the check of `Put`'s
  // `if_version`, for a key that was read and not written. Checked under the same locks, in the
  // same atomic step, as the writes; otherwise kConflict, and nothing is written.
  void Require(std::string_view table, std::string_view key, uint64_t version);
  // Forgets every staged write and requirement.
  void Clear() {
    writes_.clear();
    requirements_.clear();
  }

  // Nothing staged: no write and no requirement.
  bool empty() const { return writes_.empty() && requirements_.empty(); }
  std::span<const Write> writes() const { return writes_; }
  std::span<const Requirement> requirements() const { return requirements_; }

 private:
  std::vector<Write> writes_;
  std::vector<Requirement> requirements_;
};

}  // namespace idem

#endif  // IDEM_TABLES_H_
