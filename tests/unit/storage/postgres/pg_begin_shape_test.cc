// PgBeginShapeChooser (storage/postgres/pg_begin_shape.h), without a server: the shape follows the
// share of recent Begins that found a row, switching only past its bands, and racing threads
// count every Begin.

#include "storage/postgres/pg_begin_shape.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace idem::storage {
namespace {

// How many Begins of one kind it takes to move `chooser` to `shape`; -1 past `limit`.
int BeginsUntil(PgBeginShapeChooser& chooser, bool found, PgBeginShape shape, int limit = 1000) {
  for (int n = 1; n <= limit; ++n) {
    chooser.Saw(found);
    if (chooser.Shape() == shape) return n;
  }
  return -1;
}

TEST(PgBeginShapeChooser, StartsWithThePairAndFollowsWhatBeginsFind) {
  PgBeginShapeChooser chooser;
  EXPECT_EQ(chooser.Shape(), PgBeginShape::kReadOrInsert);
  EXPECT_DOUBLE_EQ(chooser.FoundShare(), 0.5);
  // New keys only: from a half down to a quarter takes about 44 Begins at 1/64 each.
  const int to_insert_first = BeginsUntil(chooser, false, PgBeginShape::kInsertFirst);
  EXPECT_GE(to_insert_first, 40);
  EXPECT_LE(to_insert_first, 48);
  // A replay storm: read first once three quarters of recent Begins found a row.
  const int to_read_first = BeginsUntil(chooser, true, PgBeginShape::kReadFirst);
  EXPECT_GT(to_read_first, 60);
  EXPECT_LT(to_read_first, 120);
  EXPECT_GE(chooser.FoundShare(), PgBeginShapeChooser::kReadFirstFrom);
  // Replays only: the share nears 1 and the shape stays.
  for (int n = 0; n < 2000; ++n) chooser.Saw(true);
  EXPECT_EQ(chooser.Shape(), PgBeginShape::kReadFirst);
  EXPECT_GT(chooser.FoundShare(), 0.99);
  EXPECT_LE(chooser.FoundShare(), 1.0);
  // Fresh work again: through the pair to insert first.
  EXPECT_GT(BeginsUntil(chooser, false, PgBeginShape::kReadOrInsert), 0);
  EXPECT_LT(chooser.FoundShare(), PgBeginShapeChooser::kReadFirstUntil);
  EXPECT_GT(BeginsUntil(chooser, false, PgBeginShape::kInsertFirst), 0);
  for (int n = 0; n < 2000; ++n) chooser.Saw(false);
  EXPECT_EQ(chooser.Shape(), PgBeginShape::kInsertFirst);
  EXPECT_LT(chooser.FoundShare(), 0.01);
}

// Half replays, half new keys, in any order: the share stays near a half and the shape does not
// switch at every Begin; once in a band's shape, it stays there until the share leaves the wider
// band.
TEST(PgBeginShapeChooser, ABoundaryDoesNotMakeItSwitchAtEveryBegin) {
  PgBeginShapeChooser alternating;
  for (int n = 0; n < 5000; ++n) {
    alternating.Saw(n % 2 == 0);
    ASSERT_EQ(alternating.Shape(), PgBeginShape::kReadOrInsert) << n;
  }
  // Read first at 0.75 and above; a share that then hovers at 0.65 keeps it.
  PgBeginShapeChooser hovering;
  ASSERT_GT(BeginsUntil(hovering, true, PgBeginShape::kReadFirst), 0);
  int switches = 0;
  PgBeginShape last = hovering.Shape();
  for (int n = 0; n < 6000; ++n) {
    hovering.Saw(n % 20 < 13);  // 65% found
    if (hovering.Shape() != last) ++switches;
    last = hovering.Shape();
  }
  EXPECT_EQ(switches, 0);
  EXPECT_EQ(hovering.Shape(), PgBeginShape::kReadFirst);
  // The same at 0.35 for insert first.
  PgBeginShapeChooser low;
  ASSERT_GT(BeginsUntil(low, false, PgBeginShape::kInsertFirst), 0);
  for (int n = 0; n < 6000; ++n) {
    low.Saw(n % 20 < 7);  // 35% found
    ASSERT_EQ(low.Shape(), PgBeginShape::kInsertFirst) << n;
  }
}

// Threads that race count every Begin: the same Begins seen by racing threads leave the share
// exactly where one thread seeing them all leaves it (each Saw applies the same step, so the
// order does not matter; only a lost one would).
TEST(PgBeginShapeChooser, RacingThreadsCountEveryBegin) {
  constexpr int kThreads = 8;
  constexpr int kBegins = 40;
  PgBeginShapeChooser alone;
  for (int n = 0; n < kThreads * kBegins; ++n) alone.Saw(false);
  PgBeginShapeChooser racing;
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) {
      }
      for (int n = 0; n < kBegins; ++n) racing.Saw(false);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(racing.FoundShare(), alone.FoundShare());
  EXPECT_EQ(racing.Shape(), PgBeginShape::kInsertFirst);
  // Then replays only, from every thread: read first.
  threads.clear();
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&racing] {
      for (int n = 0; n < 1000; ++n) racing.Saw(true);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(racing.Shape(), PgBeginShape::kReadFirst);
}

TEST(PgBeginShapeChooser, EveryShapeHasAName) {
  EXPECT_EQ(PgBeginShapeName(PgBeginShape::kReadOrInsert), "read or insert");
  EXPECT_EQ(PgBeginShapeName(PgBeginShape::kReadFirst), "read first");
  EXPECT_EQ(PgBeginShapeName(PgBeginShape::kInsertFirst), "insert first");
}

}  // namespace
}  // namespace idem::storage
