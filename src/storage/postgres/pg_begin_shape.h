// How a Begin's first round trip looks for its key's row in a PostgreSQL store, and the choice of
// it by what the store's recent Begins found (docs/design/pg-prepared-pace-plan.md, section 3).
// What the server spends per statement differs by shape more than the round trip does: a
// replay read by a SELECT alone costs the server about half what the SELECT and the INSERT ...
// WHERE NOT EXISTS of the pair cost, and a fresh claim inserted alone about three quarters of
// the pair. So a store that mostly sees replays (a client resending after an outage) reads
// first, one that mostly sees new keys inserts first, and one that sees both sends the pair.
#ifndef IDEM_STORAGE_POSTGRES_PG_BEGIN_SHAPE_H_
#define IDEM_STORAGE_POSTGRES_PG_BEGIN_SHAPE_H_

#include <atomic>
#include <cstdint>
#include <string_view>

namespace idem::storage {

// Every shape answers the same and leaves the same row (pg_equivalence_test); they differ in
// what the server spends and in round trips.
enum class PgBeginShape : uint8_t {
  // The row read and, when there is none, the fresh claim inserted, in one round trip: one for
  // a replay and a fresh key alike.
  kReadOrInsert,
  // The row read alone, then the claim inserted alone when there was none: one round trip for a
  // replay or a key in progress, two for a fresh key.
  kReadFirst,
  // The claim inserted alone, then the row read when there was one: one round trip for a fresh
  // key, two for a replay.
  kInsertFirst,
};

std::string_view PgBeginShapeName(PgBeginShape shape);

// The share of a store's recent Begins that found a row under their key (an exponentially
// weighted mean, each Begin weighing 1/64), and the shape it sets: read first once the share
// reaches kReadFirstFrom, until it falls below kReadFirstUntil; insert first once it falls to
// kInsertFirstFrom, until it rises above kInsertFirstUntil; the pair in between. The bands keep
// a workload near a boundary from switching at every Begin; both sides of a switch answer the
// same, so a switch costs only speed. Thread-safe, lock-free.
class PgBeginShapeChooser {
 public:
  static constexpr double kReadFirstFrom = 0.75;
  static constexpr double kReadFirstUntil = 0.6;
  static constexpr double kInsertFirstFrom = 0.25;
  static constexpr double kInsertFirstUntil = 0.4;

  // The shape for the next Begin.
  PgBeginShape Shape() const { return shape_.load(std::memory_order_relaxed); }
  // A Begin found a row under its key (`found`), or inserted its claim.
  void Saw(bool found);
  // The share of recent Begins that found a row, from 0 to 1.
  double FoundShare() const;

 private:
  static constexpr int kWeightShift = 6;  // each Begin weighs 1/2^6
  static constexpr uint32_t kOne = uint32_t{1} << 16;

  // The share, in 1/kOne; it starts at a half (the pair).
  std::atomic<uint32_t> found_share_{kOne / 2};
  std::atomic<PgBeginShape> shape_{PgBeginShape::kReadOrInsert};
};

}  // namespace idem::storage

#endif  // IDEM_STORAGE_POSTGRES_PG_BEGIN_SHAPE_H_
