// Comparing the record figures of two StoreStats (Store::GetStats), as the tests of the kept counts
// compare them with a scan of the same records.

#ifndef IDEM_TESTS_SUPPORT_STORE_STATS_H_
#define IDEM_TESTS_SUPPORT_STORE_STATS_H_

#include <gtest/gtest.h>

#include "idem/store.h"

namespace idem_test {

// The same records, states, types and oldest pending record (its key and creation time).
inline void ExpectSameRecordFigures(const idem::StoreStats& counted,
                                    const idem::StoreStats& scanned) {
  EXPECT_EQ(counted.records, scanned.records);
  EXPECT_EQ(counted.by_state, scanned.by_state);
  EXPECT_EQ(counted.by_type, scanned.by_type);
  ASSERT_EQ(counted.oldest_pending.has_value(), scanned.oldest_pending.has_value());
  if (counted.oldest_pending) {
    EXPECT_EQ(counted.oldest_pending->created, scanned.oldest_pending->created);
    EXPECT_EQ(counted.oldest_pending->key, scanned.oldest_pending->key) << "ties: the first key";
  }
}

}  // namespace idem_test

#endif  // IDEM_TESTS_SUPPORT_STORE_STATS_H_
