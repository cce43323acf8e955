// Tokens after a restore never repeat, at any reopen rate: a store reopened as fast as the machine
// allows hands out tokens ahead of the clock (each open reserves a block above the last ceiling),
// and a backup of it, restored as a copy or in place, must start above every one of them.

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "idem/idem.h"
#include "support/test_util.h"

namespace {

namespace fs = std::filesystem;
using idem_test::OpenStore;
using idem_test::TempDir;

// Reopens the store at `path` `times` times, as fast as it opens, claiming a key each time; the
// last token handed out.
uint64_t ReopenAndClaim(const std::string& path, int times) {
  uint64_t last = 0;
  for (int i = 0; i < times; ++i) {
    auto store = OpenStore(path);
    EXPECT_NE(store, nullptr);
    if (store == nullptr) return last;
    auto claim = store->Begin("after-" + std::to_string(i));
    EXPECT_TRUE(claim.ok()) << claim.status().ToString();
    if (claim.ok()) last = claim->token;
  }
  return last;
}

// The store at `path` after a backup into `backup`, then `reopens` fast reopens; returns the last
// token the original handed out after the backup.
uint64_t BackUpThenReopen(const std::string& path, const std::string& backup, int reopens) {
  {
    auto store = OpenStore(path);
    EXPECT_NE(store, nullptr);
    if (store == nullptr) return 0;
    EXPECT_TRUE(store->Begin("before").ok());
    EXPECT_TRUE(store->Backup(backup).ok());
  }
  return ReopenAndClaim(path, reopens);
}

uint64_t FirstToken(const std::string& path) {
  auto store = OpenStore(path);
  EXPECT_NE(store, nullptr);
  if (store == nullptr) return 0;
  auto claim = store->Begin("again");
  EXPECT_TRUE(claim.ok()) << claim.status().ToString();
  return claim.ok() ? claim->token : 0;
}

// A backup opened where it was written: another directory, so a copy.
TEST(TokensAfterRestore, ACopyStartsAboveEveryTokenTheOriginalHandedOutAtAnyReopenRate) {
  TempDir dir;
  const std::string backup = dir.Sub("backup");
  const uint64_t later = BackUpThenReopen(dir.StorePath(), backup, 60);
  ASSERT_GT(later, 0u);
  EXPECT_GT(FirstToken(backup), later) << "a token handed out after the backup came again";
}

// The backup's files put back into the store's own database directory (as a file-level restore
// or a file-system snapshot rolled back does): the same directory, so not recognised as a copy.
// The clock and the lead still put its tokens above the original's.
TEST(TokensAfterRestore, FilesRestoredInPlaceStartAboveEveryTokenHandedOutAfterTheBackup) {
  TempDir dir;
  const std::string backup = dir.Sub("backup");
  const uint64_t later = BackUpThenReopen(dir.StorePath(), backup, 60);
  ASSERT_GT(later, 0u);
  const fs::path database = fs::path(dir.StorePath()) / "db";
  for (const auto& entry : fs::directory_iterator(database)) fs::remove_all(entry.path());
  for (const auto& entry : fs::directory_iterator(fs::path(backup) / "db")) {
    fs::copy(entry.path(), database / entry.path().filename(), fs::copy_options::recursive);
  }
  EXPECT_GT(FirstToken(dir.StorePath()), later) << "a token handed out after the backup came again";
}

// Reopening many times does not move the counter ahead of the clock: each open starts just above
// the clock plus the lead, which opens leave as it is, so the token space is not spent by reopens
// and a restore right after them still starts above their tokens.
TEST(TokensAfterRestore, FastReopensKeepTokensNearTheClock) {
  TempDir dir;
  const auto micros = [] {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  };
  ASSERT_GT(ReopenAndClaim(dir.StorePath(), 1), 0u);
  const uint64_t last = ReopenAndClaim(dir.StorePath(), 100);
  // 100 reopens with the old reservation of a 65536-token block each ran 6.5 s ahead.
  EXPECT_LT(last, micros() + 1'000'000) << "tokens ran ahead of the clock by over a second";
}

}  // namespace
