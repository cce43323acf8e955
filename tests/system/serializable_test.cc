// Serializable table effects (docs/semantics.md, "Isolation"): a key that Execute's fn read
// through Attempt::Read must still be at the version read when its Complete applies, whether fn
// wrote it or not (WriteSet::Require); so write skew cannot happen within one store, between
// threads or between processes sharing it through its owner.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "idem/idem.h"
#include "support/child_awaiting_go.h"
#include "support/test_util.h"

namespace {

using idem::Status;
using idem::TableValue;
using idem::WriteSet;
using idem_test::ChildAwaitingGo;
using idem_test::TempDir;
using idem_test::TestOptions;

constexpr std::string_view kDoctors = "doctors";

TableValue ValueOf(idem::Store& store, std::string_view table, std::string_view key) {
  auto value = store.GetValue(table, key);
  EXPECT_TRUE(value.ok()) << value.status().ToString();
  return value.ok() ? *value : TableValue{};
}

std::string Doctor(int round, char which) {
  return "r" + std::to_string(round) + "-" + std::string(1, which);
}

// Both doctors of each of `rounds` rounds on call (1), in one commit.
void PutAllOnCall(idem::Store& store, int rounds) {
  WriteSet writes;
  for (int round = 0; round < rounds; ++round) {
    writes.Put(kDoctors, Doctor(round, 'x'), "1");
    writes.Put(kDoctors, Doctor(round, 'y'), "1");
  }
  ASSERT_OK_AND_ASSIGN(auto claim, store.Begin("setup"));
  ASSERT_OK(store.Complete("setup", claim.token, "ok", writes));
}

// One side of the write skew: doctor `own` of `round` goes off call (0) if both doctors are on
// call. Its first run calls `meet` between its reads and its write, so that both sides read
// before either commits: without validated reads, both would then go off call.
idem::Result<idem::Execution> GoOffCall(idem::Store& store, int round, char own,
                                        const std::function<void()>& meet, int& runs) {
  return store.Execute(
      "off-" + Doctor(round, own), [&](idem::Attempt& attempt) -> idem::Result<std::string> {
        IDEM_ASSIGN_OR_RETURN(TableValue x, attempt.Read(kDoctors, Doctor(round, 'x')));
        IDEM_ASSIGN_OR_RETURN(TableValue y, attempt.Read(kDoctors, Doctor(round, 'y')));
        if (++runs == 1) meet();
        if (x.value != "1" || y.value != "1") return std::string("stayed");
        IDEM_RETURN_IF_ERROR(attempt.Put(kDoctors, Doctor(round, own), "0"));
        return std::string("off");
      });
}

// In every round exactly one doctor went off call (never both: the invariant), and the other
// side ran fn again once.
void ExpectOneOffCallPerRound(idem::Store& store, int rounds) {
  for (int round = 0; round < rounds; ++round) {
    const auto x = ValueOf(store, kDoctors, Doctor(round, 'x')).value;
    const auto y = ValueOf(store, kDoctors, Doctor(round, 'y')).value;
    EXPECT_FALSE(x == "0" && y == "0") << "round " << round << ": write skew";
    EXPECT_TRUE(x == "0" || y == "0") << "round " << round;
  }
}

TEST(Serializable, WriteSkewCannotHappenBetweenThreads) {
  TempDir dir;
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  constexpr int kRounds = 100;
  PutAllOnCall(*store, kRounds);
  std::barrier meeting(2);
  const auto meet = [&] { meeting.arrive_and_wait(); };
  for (int round = 0; round < kRounds; ++round) {
    int runs_x = 0;
    int runs_y = 0;
    std::thread other([&] { EXPECT_OK(GoOffCall(*store, round, 'y', meet, runs_y).status()); });
    EXPECT_OK(GoOffCall(*store, round, 'x', meet, runs_x).status());
    other.join();
    EXPECT_EQ(runs_x + runs_y, 3) << "round " << round << ": the second to commit runs again";
  }
  ExpectOneOffCallPerRound(*store, kRounds);
}

// The owner and a process sharing the store through its socket, each one side of every round,
// meeting through pipes.
TEST(Serializable, WriteSkewCannotHappenBetweenProcesses) {
  TempDir dir;
  constexpr int kRounds = 40;
  int to_child[2];
  int to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  // Sends a byte to the other side and waits for its byte; `gone` once the other side is.
  const auto meet_through = [](int out, int in, bool& gone) {
    return [out, in, &gone] {
      const char byte = 1;
      char got = 0;
      if (gone || write(out, &byte, 1) != 1 || read(in, &got, 1) != 1) gone = true;
    };
  };
  ChildAwaitingGo child([&](uint64_t) {
    close(to_child[1]);
    close(to_parent[0]);
    auto store = idem::Store::Open(dir.StorePath(), TestOptions());
    if (!store.ok()) return 10;
    auto counters = (*store)->GetOwnerCounters();
    if (!counters.ok() || counters->pid != getppid()) return 11;  // a client of the parent
    // A required key's stale version travels to the owner, which refuses the Complete.
    auto claim = (*store)->Begin("required");
    if (!claim.ok()) return 12;
    WriteSet stale;
    stale.Require(kDoctors, Doctor(0, 'x'), 0);
    stale.Put("log", "required", "1");
    if ((*store)->Complete("required", claim->token, "ok", stale).code() !=
        Status::Code::kConflict) {
      return 13;
    }
    WriteSet current;
    current.Require(kDoctors, Doctor(0, 'x'), 1);
    current.Put("log", "required", "1");
    if (!(*store)->Complete("required", claim->token, "ok", current).ok()) return 14;
    bool parent_gone = false;
    const auto meet = meet_through(to_parent[1], to_child[0], parent_gone);
    for (int round = 0; round < kRounds; ++round) {
      int runs = 0;
      if (!GoOffCall(**store, round, 'y', meet, runs).ok()) return 15;
    }
    return parent_gone ? 16 : 0;
  });
  close(to_child[0]);
  close(to_parent[1]);
  IDEM_ASSERT_OPEN(owner, dir.StorePath());
  PutAllOnCall(*owner, kRounds);
  child.Go();
  bool child_gone = false;
  const auto meet = meet_through(to_child[1], to_parent[0], child_gone);
  for (int round = 0; round < kRounds; ++round) {
    int runs = 0;
    EXPECT_OK(GoOffCall(*owner, round, 'x', meet, runs).status());
  }
  EXPECT_EQ(child.Wait(), 0);
  EXPECT_FALSE(child_gone);
  close(to_child[1]);
  close(to_parent[0]);
  EXPECT_EQ(ValueOf(*owner, "log", "required"), (TableValue{"1", 1}));
  ExpectOneOffCallPerRound(*owner, kRounds);
}

// A key fn only read, changed by another commit before fn's Complete: fn runs again on the new
// value, whether it writes other keys or nothing at all.
TEST(Serializable, AReadOnlyKeyChangedBeforeTheCommitRunsFnAgain) {
  TempDir dir;
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  const auto set_rate = [&](std::string_view rate) {
    ASSERT_OK_AND_ASSIGN(auto claim, store->Begin(std::string("rate-") + std::string(rate)));
    WriteSet writes;
    writes.Put("rates", "eur", rate);
    ASSERT_OK(store->Complete(std::string("rate-") + std::string(rate), claim.token, "ok", writes));
  };
  set_rate("2");
  for (const bool writes_too : {true, false}) {
    const std::string message = writes_too ? "convert" : "quote";
    int runs = 0;
    ASSERT_OK_AND_ASSIGN(
        auto execution,
        store->Execute(message, [&](idem::Attempt& attempt) -> idem::Result<std::string> {
          IDEM_ASSIGN_OR_RETURN(TableValue rate, attempt.Read("rates", "eur"));
          if (++runs == 1) set_rate(writes_too ? "3" : "4");
          if (writes_too) IDEM_RETURN_IF_ERROR(attempt.Put("amounts", message, *rate.value));
          return *rate.value;
        }));
    EXPECT_EQ(runs, 2) << message;
    EXPECT_EQ(execution.result, writes_too ? "3" : "4");
    if (writes_too) {
      EXPECT_EQ(ValueOf(*store, "amounts", message), (TableValue{"3", 1}));
    }
  }
}

// A key read absent (version 0), then made by another commit: fn runs again; and a Complete
// that requires it never written is refused, writes nothing, and leaves the claim to complete.
TEST(Serializable, AKeyReadAbsentAndThenMadeIsAConflict) {
  TempDir dir;
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  const auto open_account = [&](std::string_view name) {
    ASSERT_OK_AND_ASSIGN(auto claim, store->Begin(std::string("open-") + std::string(name)));
    WriteSet writes;
    writes.Put("accounts", name, "0");
    ASSERT_OK(store->Complete(std::string("open-") + std::string(name), claim.token, "ok", writes));
  };
  int runs = 0;
  ASSERT_OK_AND_ASSIGN(
      auto execution,
      store->Execute("check-alice", [&](idem::Attempt& attempt) -> idem::Result<std::string> {
        IDEM_ASSIGN_OR_RETURN(TableValue account, attempt.Read("accounts", "alice"));
        if (++runs == 1) open_account("alice");
        return std::string(account.value ? "open" : "absent");
      }));
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(execution.result, "open");

  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("m"));
  open_account("bob");
  WriteSet stale;
  stale.Require("accounts", "bob", 0);
  stale.Put("log", "m", "x");
  EXPECT_CODE(store->Complete("m", claim.token, "ok", stale), kConflict);
  EXPECT_EQ(ValueOf(*store, "log", "m"), TableValue{});
  ASSERT_OK_AND_ASSIGN(auto record, store->Get("m"));
  EXPECT_EQ(record->state, idem::State::kPending);
  // Required at its version, and a key of a table never made required never written: applied.
  WriteSet current;
  current.Require("accounts", "bob", 1);
  current.Require("nowhere", "k", 0);
  WriteSet bad;
  bad.Require("bad name", "k", 0);
  EXPECT_CODE(store->Complete("m", claim.token, "ok", bad), kInvalidArgument);
  ASSERT_OK(store->Complete("m", claim.token, "ok", current));
  ASSERT_OK_AND_ASSIGN(record, store->Get("m"));
  EXPECT_EQ(record->state, idem::State::kDone);
  ASSERT_OK_AND_ASSIGN(auto tables, store->ListTables());
  // Neither the refused write to "log" nor the requirement on "nowhere" made a table.
  EXPECT_EQ(tables, std::vector<std::string>{"accounts"});
}

}  // namespace
