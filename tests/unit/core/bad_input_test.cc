// Tests of bad inputs through the public API: empty, oversized and binary keys, oversized
// results, negative leases, bad store paths, and read-only stores.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "idem/idem.h"
#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::Outcome;
using idem::Record;
using idem::State;
using idem_test::TempDir;
using idem_test::TestOptions;
using idem_test::WithoutHolder;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

bool ScanIsEmpty(idem::Store& store) {
  bool empty = true;
  const idem::Status status = store.Scan({}, [&](const Record&) {
    empty = false;
    return false;
  });
  EXPECT_TRUE(status.ok()) << status.ToString();
  return empty;
}

// ---- Keys ------------------------------------------------------------------------------------

// Bad keys, results, labels and leases: every test runs on each backend (backend.h). Bad store
// paths: BadOpen.
class BadInput : public idem_test::OnEachBackend {};

TEST_P(BadInput, RejectsAnEmptyKey) {
  const idem_test::TestStore here(GetParam());
  auto store = here.Open();
  ASSERT_NE(store, nullptr);
  auto claim = store->Begin("");
  ASSERT_FALSE(claim.ok());
  EXPECT_EQ(claim.status().code(), idem::Status::Code::kInvalidArgument)
      << claim.status().ToString();
  EXPECT_TRUE(Contains(claim.status().message(), "empty")) << claim.status().ToString();
  EXPECT_TRUE(Contains(claim.status().ToString(), "InvalidArgument: "))
      << claim.status().ToString();

  // The token calls cannot find a record for an empty key either way.
  for (const idem::Status& status :
       {store->Complete("", 1, "r"), store->Fail("", 1, "e"), store->Extend("", 1, 1s),
        store->SaveCheckpoint("", 1, "c"), store->Forget("")}) {
    EXPECT_TRUE(status.code() == idem::Status::Code::kInvalidArgument ||
                status.code() == idem::Status::Code::kNotFound)
        << status.ToString();
  }
  auto got = store->Get("");
  if (got.ok()) {
    EXPECT_FALSE(got->has_value());
  } else {
    EXPECT_EQ(got.status().code(), idem::Status::Code::kInvalidArgument);
  }
  bool ran = false;
  auto execution = store->Execute("", [&](idem::Attempt&) -> idem::Result<std::string> {
    ran = true;
    return std::string("x");
  });
  ASSERT_FALSE(execution.ok());
  EXPECT_EQ(execution.status().code(), idem::Status::Code::kInvalidArgument);
  EXPECT_FALSE(ran);
}

TEST_P(BadInput, RejectsAnOversizedKeyNamingBothSizes) {
  const idem_test::TestStore here(GetParam());
  auto store = here.Open();
  ASSERT_NE(store, nullptr);
  const std::string key(513, 'k');
  auto claim = store->Begin(key);
  ASSERT_FALSE(claim.ok());
  EXPECT_EQ(claim.status().code(), idem::Status::Code::kInvalidArgument)
      << claim.status().ToString();
  EXPECT_TRUE(Contains(claim.status().message(), "513")) << claim.status().ToString();
  EXPECT_TRUE(Contains(claim.status().message(), "512")) << claim.status().ToString();
  ASSERT_OK_AND_ASSIGN(auto got, store->Get(std::string(512, 'k')));
  EXPECT_FALSE(got.has_value());
  EXPECT_TRUE(ScanIsEmpty(*store));
}

TEST_P(BadInput, RejectsAKeyOverAConfiguredMaximum) {
  const idem_test::TestStore here(GetParam());
  idem::Options options = TestOptions();
  options.max_key_size = 16;
  auto store = here.Open(options);
  ASSERT_NE(store, nullptr);
  auto claim = store->Begin(std::string(17, 'x'));
  ASSERT_FALSE(claim.ok());
  EXPECT_EQ(claim.status().code(), idem::Status::Code::kInvalidArgument);
  EXPECT_TRUE(Contains(claim.status().message(), "17")) << claim.status().ToString();
  EXPECT_TRUE(Contains(claim.status().message(), "16")) << claim.status().ToString();
  ASSERT_OK_AND_ASSIGN(auto ok, store->Begin(std::string(16, 'x')));
  EXPECT_EQ(ok.outcome, Outcome::kAcquired);
}

TEST_P(BadInput, AcceptsAKeyOfExactlyTheMaximumSize) {
  const idem_test::TestStore here(GetParam());
  const std::string key(512, '\xab');
  {
    auto store = here.Open();
    ASSERT_NE(store, nullptr);
    ASSERT_OK_AND_ASSIGN(auto claim, store->Begin(key));
    ASSERT_EQ(claim.outcome, Outcome::kAcquired);
    EXPECT_EQ(claim.record.key, key);
    ASSERT_OK(store->Complete(key, claim.token, "r"));
  }
  auto store = here.Open();
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto got, store->Get(key));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->key, key);
  EXPECT_EQ(got->result, "r");
  ASSERT_OK_AND_ASSIGN(auto replay, store->Begin(key));
  EXPECT_EQ(replay.outcome, Outcome::kReplay);
}

TEST_P(BadInput, BinaryKeysRoundTripAndAreDistinctFromTheirPrefixes) {
  const idem_test::TestStore here(GetParam());
  const std::vector<std::string> keys = {
      std::string("\0", 1),
      std::string("\0\0", 2),
      std::string("a", 1),
      std::string("a\0", 2),
      std::string("a\0b", 3),
      std::string("a\0c", 3),
      std::string("\xff", 1),
      std::string("\xff\xff", 2),
      std::string("\xff\0\xff", 3),
      std::string("a\xff", 2),
      std::string("\x01\x02\x7f\x80", 4),
  };
  {
    auto store = here.Open();
    ASSERT_NE(store, nullptr);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      ASSERT_OK_AND_ASSIGN(auto claim, store->Begin(keys[i]));
      EXPECT_EQ(claim.outcome, Outcome::kAcquired) << "key #" << i;
      EXPECT_EQ(claim.record.key, keys[i]);
      ASSERT_OK(store->Complete(keys[i], claim.token, "result-" + std::to_string(i)));
    }
  }
  auto store = here.Open();
  ASSERT_NE(store, nullptr);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    ASSERT_OK_AND_ASSIGN(auto got, store->Get(keys[i]));
    ASSERT_TRUE(got.has_value()) << "key #" << i;
    EXPECT_EQ(got->key, keys[i]);
    EXPECT_EQ(got->result, "result-" + std::to_string(i));
    ASSERT_OK_AND_ASSIGN(auto replay, store->Begin(keys[i]));
    EXPECT_EQ(replay.outcome, Outcome::kReplay) << "key #" << i;
    EXPECT_EQ(replay.record.result, "result-" + std::to_string(i));
  }
  std::vector<std::string> scanned;
  ASSERT_OK(store->Scan({}, [&](const Record& record) {
    scanned.push_back(record.key);
    return true;
  }));
  std::vector<std::string> sorted = keys;
  std::sort(sorted.begin(), sorted.end());  // bytewise order (char_traits<char> compares unsigned)
  EXPECT_EQ(scanned, sorted);

  // A binary prefix scan.
  std::vector<std::string> with_prefix;
  ASSERT_OK(store->Scan({.prefix = std::string_view("a\0", 2)}, [&](const Record& record) {
    with_prefix.push_back(record.key);
    return true;
  }));
  EXPECT_EQ(with_prefix, (std::vector<std::string>{std::string("a\0", 2), std::string("a\0b", 3),
                                                   std::string("a\0c", 3)}));

  // Forgetting a key leaves its prefixes and extensions alone.
  ASSERT_OK(store->Forget(std::string("a\0", 2)));
  ASSERT_OK_AND_ASSIGN(auto a, store->Get("a"));
  EXPECT_TRUE(a.has_value());
  ASSERT_OK_AND_ASSIGN(auto a0b, store->Get(std::string("a\0b", 3)));
  EXPECT_TRUE(a0b.has_value());
  ASSERT_OK_AND_ASSIGN(auto a0, store->Get(std::string("a\0", 2)));
  EXPECT_FALSE(a0.has_value());
}

// ---- Results, labels, leases -----------------------------------------------------------------

TEST_P(BadInput, RejectsAnOversizedResultAndKeepsTheRecordPending) {
  const idem_test::TestStore here(GetParam());
  idem::Options options = TestOptions();
  options.max_result_size = 1024;
  auto store = here.Open(options);
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("k"));

  EXPECT_CODE(store->Complete("k", claim.token, std::string(1025, 'r')), kInvalidArgument);
  EXPECT_CODE(store->Fail("k", claim.token, std::string(1025, 'e')), kInvalidArgument);
  EXPECT_CODE(store->SaveCheckpoint("k", claim.token, std::string(1025, 'c')), kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(auto got, store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(WithoutHolder(*got), WithoutHolder(claim.record));

  // The owner can still finish with a valid result; exactly the maximum is valid.
  ASSERT_OK(store->SaveCheckpoint("k", claim.token, std::string(1024, 'c')));
  ASSERT_OK(store->Complete("k", claim.token, std::string(1024, 'r')));
  ASSERT_OK_AND_ASSIGN(auto done, store->Get("k"));
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->state, State::kDone);
  EXPECT_EQ(done->result, std::string(1024, 'r'));
}

TEST_P(BadInput, RejectsAResultOverTheDefaultMaximum) {
  const idem_test::TestStore here(GetParam());
  auto store = here.Open();
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("k"));
  EXPECT_CODE(store->Complete("k", claim.token, std::string((1 << 20) + 1, 'r')), kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(auto got, store->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->state, State::kPending);
  ASSERT_OK(store->Complete("k", claim.token, std::string(1 << 20, 'r')));
  ASSERT_OK_AND_ASSIGN(auto done, store->Get("k"));
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->result.size(), std::size_t{1} << 20);
}

TEST_P(BadInput, ExecuteRecordsAnOversizedResultAsAnError) {
  const idem_test::TestStore here(GetParam());
  idem::Options options = TestOptions();
  options.max_result_size = 16;
  auto store = here.Open(options);
  ASSERT_NE(store, nullptr);
  auto execution = store->Execute(
      "k", [](idem::Attempt&) -> idem::Result<std::string> { return std::string(17, 'r'); });
  ASSERT_FALSE(execution.ok());
  EXPECT_EQ(execution.status().code(), idem::Status::Code::kInvalidArgument)
      << execution.status().ToString();
  // Whatever Execute did with the attempt, no oversized result is stored.
  ASSERT_OK_AND_ASSIGN(auto got, store->Get("k"));
  if (got.has_value()) {
    EXPECT_NE(got->state, State::kDone);
  }
}

TEST_P(BadInput, RejectsOversizedLabels) {
  const idem_test::TestStore here(GetParam());
  auto store = here.Open();
  ASSERT_NE(store, nullptr);
  const std::string long_label(257, 'l');
  auto by_type = store->Begin("k", {.type = long_label});
  ASSERT_FALSE(by_type.ok());
  EXPECT_EQ(by_type.status().code(), idem::Status::Code::kInvalidArgument);
  auto by_fingerprint = store->Begin("k", {.fingerprint = long_label});
  ASSERT_FALSE(by_fingerprint.ok());
  EXPECT_EQ(by_fingerprint.status().code(), idem::Status::Code::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(auto got, store->Get("k"));
  EXPECT_FALSE(got.has_value());

  const std::string max_label(256, 'l');
  ASSERT_OK_AND_ASSIGN(auto claim,
                       store->Begin("k", {.type = max_label, .fingerprint = max_label}));
  EXPECT_EQ(claim.outcome, Outcome::kAcquired);
  EXPECT_EQ(claim.record.type, max_label);
}

TEST_P(BadInput, RejectsANegativeLeaseOrRetention) {
  const idem_test::TestStore here(GetParam());
  auto store = here.Open();
  ASSERT_NE(store, nullptr);
  auto lease = store->Begin("k", {.lease = -1ms});
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(lease.status().code(), idem::Status::Code::kInvalidArgument);
  auto retention = store->Begin("k", {.retention = -1h});
  ASSERT_FALSE(retention.ok());
  EXPECT_EQ(retention.status().code(), idem::Status::Code::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(auto got, store->Get("k"));
  EXPECT_FALSE(got.has_value());

  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("k"));
  EXPECT_CODE(store->Extend("k", claim.token, -5s), kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(auto still, store->Get("k"));
  ASSERT_TRUE(still.has_value());
  EXPECT_EQ(still->lease_deadline, claim.record.lease_deadline);
}

// ---- Store paths -----------------------------------------------------------------------------

TEST(BadOpen, OpeningAMissingStoreWithoutCreateIsNotFound) {
  TempDir dir;
  idem::Options options = TestOptions();
  options.create_if_missing = false;
  auto store = idem::Store::Open(dir.Sub("missing"), options);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), idem::Status::Code::kNotFound) << store.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("missing")));

  // An existing store opens without create_if_missing.
  { IDEM_ASSERT_OPEN(created, dir.StorePath()); }
  IDEM_ASSERT_OPEN(existing, dir.StorePath(), options);
}

TEST(BadOpen, OpeningARegularFileFails) {
  TempDir dir;
  const std::string file = dir.Sub("file");
  std::ofstream(file) << "not a store";
  auto store = idem::Store::Open(file);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().ToString(), "");
  // A path beneath a regular file cannot be created either.
  auto beneath = idem::Store::Open(file + "/store");
  EXPECT_FALSE(beneath.ok());
  // The file is left alone.
  std::ifstream in(file);
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "not a store");
}

TEST(BadOpen, OpeningAnEmptyPathFails) {
  auto store = idem::Store::Open("");
  EXPECT_FALSE(store.ok());
}

// ---- Read-only stores ------------------------------------------------------------------------

TEST(BadOpen, AReadOnlyStoreRejectsWritesAndServesReads) {
  TempDir dir;
  uint64_t token = 0;
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    ASSERT_OK_AND_ASSIGN(auto done, store->Begin("done"));
    ASSERT_OK(store->Complete("done", done.token, "r"));
    ASSERT_OK_AND_ASSIGN(auto pending, store->Begin("pending"));
    token = pending.token;
  }
  idem::Options options = TestOptions();
  options.read_only = true;
  IDEM_ASSERT_OPEN(store, dir.StorePath(), options);

  auto claim = store->Begin("new");
  ASSERT_FALSE(claim.ok());
  EXPECT_EQ(claim.status().code(), idem::Status::Code::kInvalidArgument);
  auto existing = store->Begin("done");
  ASSERT_FALSE(existing.ok());
  EXPECT_EQ(existing.status().code(), idem::Status::Code::kInvalidArgument);
  EXPECT_CODE(store->Complete("pending", token, "r"), kInvalidArgument);
  EXPECT_CODE(store->Fail("pending", token, "e"), kInvalidArgument);
  EXPECT_CODE(store->Extend("pending", token, 1s), kInvalidArgument);
  EXPECT_CODE(store->SaveCheckpoint("pending", token, "c"), kInvalidArgument);
  EXPECT_CODE(store->Forget("done"), kInvalidArgument);
  auto purge = store->Purge();
  ASSERT_FALSE(purge.ok());
  EXPECT_EQ(purge.status().code(), idem::Status::Code::kInvalidArgument);
  bool ran = false;
  auto execution = store->Execute("new", [&](idem::Attempt&) -> idem::Result<std::string> {
    ran = true;
    return std::string("x");
  });
  EXPECT_FALSE(execution.ok());
  EXPECT_FALSE(ran);

  ASSERT_OK_AND_ASSIGN(auto done, store->Get("done"));
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->state, State::kDone);
  EXPECT_EQ(done->result, "r");
  ASSERT_OK_AND_ASSIGN(auto pending, store->Get("pending"));
  ASSERT_TRUE(pending.has_value());
  EXPECT_EQ(pending->state, State::kPending);
  EXPECT_EQ(pending->token, token);
  ASSERT_OK_AND_ASSIGN(auto absent, store->Get("new"));
  EXPECT_FALSE(absent.has_value());
  int scanned = 0;
  ASSERT_OK(store->Scan({}, [&](const Record&) {
    ++scanned;
    return true;
  }));
  EXPECT_EQ(scanned, 2);
}

TEST(BadOpen, AReadOnlyStoreOpensWhileAWriterHasItOpen) {
  TempDir dir;
  IDEM_ASSERT_OPEN(writer, dir.StorePath());
  ASSERT_OK_AND_ASSIGN(auto claim, writer->Begin("k"));
  ASSERT_OK(writer->Complete("k", claim.token, "r"));

  idem::Options options = TestOptions();
  options.read_only = true;
  IDEM_ASSERT_OPEN(reader, dir.StorePath(), options);
  ASSERT_OK_AND_ASSIGN(auto got, reader->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->result, "r");
  auto begin = reader->Begin("other");
  ASSERT_FALSE(begin.ok());
  EXPECT_EQ(begin.status().code(), idem::Status::Code::kInvalidArgument);

  // The writer is unaffected.
  ASSERT_OK_AND_ASSIGN(auto other, writer->Begin("other"));
  EXPECT_EQ(other.outcome, Outcome::kAcquired);
}

TEST(BadOpen, AReadOnlyStoreMustExist) {
  TempDir dir;
  idem::Options options = TestOptions();
  options.read_only = true;
  auto store = idem::Store::Open(dir.Sub("missing"), options);
  EXPECT_FALSE(store.ok());
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("missing")));
}

IDEM_ON_EACH_BACKEND(BadInput);

}  // namespace
