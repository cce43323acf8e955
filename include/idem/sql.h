// The application's own SQL in the transaction that completes a request's record, for a store
// kept in PostgreSQL (Store::ExecuteInTransaction, docs/semantics.md, "Exactly-once effects"):
//
//   auto paid = store->ExecuteInTransaction(
//       order_id, {.type = "pay"},
//       [&](idem::Attempt&, idem::SqlTransaction& sql) -> idem::Result<std::string> {
//         IDEM_ASSIGN_OR_RETURN(idem::SqlRows updated,
//                               sql.Exec("UPDATE orders SET status = 'PAID', version = version + 1
//                               "
//                                        "WHERE id = $1 AND status = 'WAIT_PAY'",
//                                        {order_id}));
//         if (updated.affected() != 1) return idem::Terminal("order not awaiting payment");
//         return std::string("paid");
//       });
//
// The UPDATE and the record's completion commit together, or neither does. The transaction
// runs at the server's default isolation level (READ COMMITTED, unless the database or role
// sets default_transaction_isolation); for SERIALIZABLE, make
// `SET TRANSACTION ISOLATION LEVEL SERIALIZABLE` fn's first Exec: idem sends nothing before it
// that would take a snapshot. A serialization failure then runs fn again (kConflict), and fn
// must finish within a third of its lease: a renewal of the record's row meanwhile fails the
// commit (docs/postgresql.md, "Isolation").

#ifndef IDEM_SQL_H_
#define IDEM_SQL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idem/export.h"
#include "idem/status.h"

namespace idem {

// What one statement returned: its rows, each value in PostgreSQL's text form (what psql
// shows: "42", "t", "2026-12-02 10:00:00+00"), and how many rows it changed.
class IDEM_EXPORT SqlRows {
 public:
  SqlRows() = default;
  // `values` row by row, `column_names.size()` a row.
  SqlRows(std::vector<std::string> column_names, std::vector<std::optional<std::string>> values,
          uint64_t affected);

  int size() const;  // rows
  int columns() const { return static_cast<int>(column_names_.size()); }
  // Rows inserted, updated or deleted (for a SELECT, rows returned).
  uint64_t affected() const { return affected_; }
  // The value in `row` and `column` (from 0); nullopt for NULL or out of range.
  std::optional<std::string_view> Get(int row, int column) const;
  // The value in `row` of the column named `column`; nullopt for NULL, or no such row or column.
  std::optional<std::string_view> Get(int row, std::string_view column) const;
  const std::vector<std::string>& column_names() const { return column_names_; }

 private:
  std::vector<std::string> column_names_;
  std::vector<std::optional<std::string>> values_;
  uint64_t affected_ = 0;
};

// A transaction open on the store's database, handed to ExecuteInTransaction's fn.
class IDEM_EXPORT SqlTransaction {
 public:
  virtual ~SqlTransaction() = default;

  // Runs one statement in the transaction (one round trip). Its text names parameters $1, $2,
  // ...; `params` gives them in their text form, nullopt for NULL, and the server infers each
  // one's type from where it is used (cast where it cannot: $1::bigint). Values never go into
  // the text. A NUL byte in the statement or in a parameter (text, which cannot hold one) is
  // kInvalidArgument naming it (the parameter's $n and the offset), refused before anything is
  // sent, so the transaction goes on; send bytes as hex (decode($1, 'hex')). Otherwise, the
  // first error ends the transaction: the server rolled it back, this call and every later one
  // return it, and fn should return it:
  //   kConflict        a deadlock or a serialization failure (SQLSTATE 40P01, 40001):
  //                    ExecuteInTransaction runs fn again in a new transaction
  //   kTimedOut        the statement ran past Options::request_timeout
  //   kUnavailable     the connection was lost
  //   kInvalidArgument the statement's own error (a syntax error, a constraint), with its
  //                    SQLSTATE
  virtual Result<SqlRows> Exec(std::string_view sql,
                               const std::vector<std::optional<std::string>>& params = {}) = 0;
};

// Internal: what ExecuteInTransaction drives. The application sees its SqlTransaction side.
class IDEM_EXPORT ClaimTransaction : public SqlTransaction {
 public:
  // Completes the claim with `result` in this transaction (the record's fenced UPDATE), then
  // commits. kLeaseLost when the claim is no longer this attempt's (rolled back: none of the
  // transaction's writes apply). kUnavailable when the connection was lost: committed or not,
  // the record tells (done with this token, or still pending).
  virtual Status CompleteAndCommit(std::string_view result) = 0;
  // Rolls back (also when it goes, if still open).
  virtual void RollBack() = 0;
};

}  // namespace idem

#endif  // IDEM_SQL_H_
