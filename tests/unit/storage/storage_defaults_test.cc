// The storage interface's defaults (storage/storage.h): what a storage that implements only the
// required calls (Update, Read, Remove, Scan, Purge) answers for the rest. A new backend starts
// from these, and the engine's callers rely on them: table calls refused with one message that
// names the reason, a ReadOrCreate that only reads, a TransitionIfCurrent that leaves the
// decision to Update, no outage grace, refusals that say what the storage cannot do, and write
// groups that write each Update at once.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/state_machine.h"
#include "idem/options.h"
#include "idem/record.h"
#include "idem/status.h"
#include "idem/store.h"
#include "idem/tables.h"
#include "storage/storage.h"

namespace {

using idem::Durability;
using idem::Record;
using idem::Status;
using idem::storage::Storage;
using std::chrono::milliseconds;

constexpr const char* kNoTables =
    "application tables are kept in store directories only: a store in PostgreSQL leaves the "
    "application's state to the application's own tables";

// The least a storage implements: records in a map, one clock time, tokens counted up.
class RequiredCallsOnly : public Storage {
 public:
  Status Update(std::string_view key, Decide decide, Durability, std::optional<uint64_t>) override {
    std::optional<Record> stored;
    if (auto found = records_.find(std::string(key)); found != records_.end()) {
      stored = found->second;
    }
    auto next_token = [this](uint64_t above) -> idem::Result<uint64_t> {
      last_token_ = std::max(last_token_, above) + 1;
      return last_token_;
    };
    const Record* write = decide(stored, now_, next_token);
    if (write != nullptr) records_[std::string(key)] = *write;
    return Status::OK();
  }
  idem::Result<ReadResult> Read(std::string_view key) override {
    ReadResult read;
    read.now = now_;
    if (auto found = records_.find(std::string(key)); found != records_.end()) {
      read.record = found->second;
    }
    return read;
  }
  idem::Result<bool> Remove(std::string_view key, Durability,
                            const idem::engine::AsRead*) override {
    return records_.erase(std::string(key)) > 0;
  }
  Status Scan(const idem::ScanOptions&, idem::FunctionRef<bool(Record&&, TimePoint)> visit,
              idem::storage::ReadView*) override {
    for (const auto& [key, record] : records_) {
      if (!visit(Record(record), now_)) break;
    }
    return Status::OK();
  }
  idem::Result<uint64_t> Purge(const idem::PurgeOptions&) override { return uint64_t{0}; }

  std::size_t size() const { return records_.size(); }

 private:
  std::map<std::string, Record> records_;
  TimePoint now_ = TimePoint(std::chrono::seconds(1'800'000'000));
  uint64_t last_token_ = 0;
};

Record Pending(std::string key, uint64_t token) {
  Record record;
  record.key = std::move(key);
  record.state = idem::State::kPending;
  record.token = token;
  record.attempts = 1;
  return record;
}

// Writes `record` under its key through Update, as the engine's callers do.
Status Write(Storage& storage, const Record& record, Durability durability = Durability::kSync) {
  auto decide = [&](std::optional<Record>&, Storage::TimePoint,
                    idem::engine::NextToken) -> const Record* { return &record; };
  return storage.Update(record.key, decide, durability, std::nullopt);
}

void ExpectRefused(const Status& status, const std::string& message) {
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
  EXPECT_EQ(status.message(), message);
}

TEST(StorageDefaults, TableCallsAreRefusedNamingWhyAndWriteNothing) {
  RequiredCallsOnly storage;
  const Record claim = Pending("k", 1);
  int decided = 0;
  auto decide = [&](std::optional<Record>&, Storage::TimePoint,
                    idem::engine::NextToken) -> const Record* {
    ++decided;
    return &claim;
  };
  idem::WriteSet set;
  set.Put("accounts", "alice", "10");
  ExpectRefused(storage.UpdateWithWrites("k", decide, set, Durability::kSync), kNoTables);
  EXPECT_EQ(decided, 0);
  EXPECT_EQ(storage.size(), 0u);

  ExpectRefused(storage.ReadValue("accounts", "alice").status(), kNoTables);
  const std::pair<std::string, idem::TableValue> values[] = {{"alice", {"10", 1}}};
  ExpectRefused(storage.ImportValues("accounts", values).status(), kNoTables);
  int visited = 0;
  ExpectRefused(storage.ScanValues("accounts", {},
                                   [&](std::string_view, idem::TableValue&&) {
                                     ++visited;
                                     return true;
                                   }),
                kNoTables);
  EXPECT_EQ(visited, 0);

  auto tables = storage.ListTables();
  ASSERT_TRUE(tables.ok()) << tables.status().ToString();
  EXPECT_TRUE(tables->empty());
}

TEST(StorageDefaults, ReadOrCreateOnlyReads) {
  RequiredCallsOnly storage;
  idem::engine::BeginRequest request{.key = "k",
                                     .type = "pay",
                                     .fingerprint = "",
                                     .lease = milliseconds(1000),
                                     .retention = milliseconds(60'000),
                                     .holder = {}};
  auto absent = storage.ReadOrCreate("k", request, Durability::kSync);
  ASSERT_TRUE(absent.ok()) << absent.status().ToString();
  EXPECT_FALSE(absent->record.has_value());
  EXPECT_FALSE(absent->created.has_value()) << "the default creates no claim";
  EXPECT_EQ(storage.size(), 0u);

  ASSERT_TRUE(Write(storage, Pending("k", 7)).ok());
  auto present = storage.ReadOrCreate("k", request, Durability::kSync);
  ASSERT_TRUE(present.ok()) << present.status().ToString();
  ASSERT_TRUE(present->record.has_value());
  EXPECT_EQ(present->record->token, 7u);
  EXPECT_FALSE(present->created.has_value());
}

// A storage that locks keys decides on what it reads under the lock: the default DecideOnRead is
// Update, whatever the earlier read saw.
TEST(StorageDefaults, DecideOnReadDecidesOnTheRecordAsStoredNow) {
  RequiredCallsOnly storage;
  ASSERT_TRUE(Write(storage, Pending("k", 7)).ok());
  auto read = storage.Read("k");
  ASSERT_TRUE(read.ok() && read->record.has_value());
  ASSERT_TRUE(Write(storage, Pending("k", 8)).ok());  // changed since the read
  const Record next = Pending("k", 9);
  std::optional<uint64_t> decided_on;
  const auto decide = [&](std::optional<Record>& stored, Storage::TimePoint,
                          idem::engine::NextToken) -> const Record* {
    decided_on = stored ? stored->token : 0;
    return &next;
  };
  ASSERT_TRUE(storage.DecideOnRead("k", *read, decide, Durability::kSync, std::nullopt).ok());
  EXPECT_EQ(decided_on, 8u) << "decided on the record stored, not the one read before";
  auto after = storage.Read("k");
  ASSERT_TRUE(after.ok() && after->record.has_value());
  EXPECT_EQ(after->record->token, 9u);
}

// Forget removes a visible record; one whose retention is over, or none, is left to purge and
// answered false.
TEST(StorageDefaults, ForgetReadsThenRemovesWhatIsVisible) {
  RequiredCallsOnly storage;
  Record live = Pending("live", 1);
  live.expires = Storage::TimePoint::max();
  Record expired = Pending("expired", 2);  // expires at the epoch, long before the storage's now
  ASSERT_TRUE(Write(storage, live).ok());
  ASSERT_TRUE(Write(storage, expired).ok());
  auto forgotten = storage.Forget("live", Durability::kSync, nullptr);
  ASSERT_TRUE(forgotten.ok() && *forgotten);
  auto not_visible = storage.Forget("expired", Durability::kSync, nullptr);
  ASSERT_TRUE(not_visible.ok());
  EXPECT_FALSE(*not_visible);
  auto absent = storage.Forget("absent", Durability::kSync, nullptr);
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(*absent);
  EXPECT_EQ(storage.size(), 1u) << "the expired record stays for purge";
}

TEST(StorageDefaults, TransitionIfCurrentLeavesTheDecisionToUpdate) {
  RequiredCallsOnly storage;
  ASSERT_TRUE(Write(storage, Pending("k", 3)).ok());
  idem::engine::TransitionRequest complete{
      .kind = idem::engine::TransitionKind::kComplete, .token = 3, .payload = "charged"};
  auto applied = storage.TransitionIfCurrent("k", complete, Durability::kSync);
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  EXPECT_FALSE(*applied);
  auto read = storage.Read("k");
  ASSERT_TRUE(read.ok() && read->record.has_value());
  EXPECT_EQ(read->record->state, idem::State::kPending) << "nothing applied";
  EXPECT_EQ(read->record->result, "");
}

TEST(StorageDefaults, NoOutageGraceIsOwed) {
  RequiredCallsOnly storage;
  auto grace = storage.OutageGrace(milliseconds(5000));
  ASSERT_TRUE(grace.ok()) << grace.status().ToString();
  EXPECT_EQ(grace->left, milliseconds(0));
  EXPECT_EQ(grace->lease_ended_after, Storage::TimePoint::min());
  EXPECT_EQ(grace->written_before, Storage::TimePoint::max());
}

TEST(StorageDefaults, WhatItCannotDoIsRefusedByName) {
  RequiredCallsOnly storage;
  ExpectRefused(storage.OpenView().status(), "this storage cannot read as of one moment");
  ExpectRefused(storage.Checkpoint("/nonexistent/copy"), "this storage cannot be copied by idem");
  ExpectRefused(storage.ReserveTokensAbove(100),
                "this storage cannot take records with their own tokens");
  ExpectRefused(storage.Sync(), "this storage cannot sync buffered writes on demand");
}

TEST(StorageDefaults, AWriteGroupWritesEachUpdateAtOnce) {
  RequiredCallsOnly storage;
  storage.StartWriteGroup();
  ASSERT_TRUE(Write(storage, Pending("a", 1), Durability::kBuffered).ok());
  ASSERT_TRUE(Write(storage, Pending("b", 2), Durability::kBuffered).ok());
  EXPECT_EQ(storage.GroupedWrites(), 0u);
  auto read = storage.Read("b");
  ASSERT_TRUE(read.ok());
  EXPECT_TRUE(read->record.has_value()) << "written before the group ends";
  EXPECT_TRUE(storage.FinishWriteGroup().empty());
  EXPECT_EQ(storage.size(), 2u);
}

}  // namespace
