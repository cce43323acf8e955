// The small tools of src/util/ that every layer shares: hex, random bytes, backoff, deadlines;
// and the
// defaults helpers and counter table of the public headers that replaced copies of them.

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "idem/counters.h"
#include "idem/options.h"
#include "idem/status.h"
#include "util/backoff.h"
#include "util/check.h"
#include "util/deadline.h"
#include "util/escape.h"
#include "util/hex.h"
#include "util/process.h"
#include "util/random.h"
#include "util/record_fields.h"

namespace {

using namespace std::chrono_literals;

// IDEM_DCHECK aborts naming the condition where checks are on (builds without NDEBUG: the
// sanitizer presets), and never evaluates it where they are off.
TEST(Dcheck, AbortsNamingTheBrokenConditionOnlyWhereChecksAreOn) {
  int evaluated = 0;
  IDEM_DCHECK(++evaluated == 1);
  EXPECT_EQ(evaluated, IDEM_DCHECK_IS_ON ? 1 : 0);
#if IDEM_DCHECK_IS_ON
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(IDEM_DCHECK(evaluated == 2), "invariant broken: evaluated == 2");
#endif
}

TEST(Hex, EncodesEveryByteAsTwoLowercaseDigits) {
  EXPECT_EQ(idem::util::ToHex(std::string("\x00\x0f\xa0\xff", 4)), "000fa0ff");
  EXPECT_EQ(idem::util::ToHex(""), "");
  std::string out = "x";
  idem::util::AppendHexByte(out, 0xab);
  EXPECT_EQ(out, "xab");
  idem::util::AppendEscapedByte(out, 0x1b);
  EXPECT_EQ(out, "xab\\x1b");
}

TEST(Hex, DecodesEitherCaseAndRefusesWhatIsNotHex) {
  std::string every_byte;
  for (int i = 0; i < 256; ++i) every_byte += static_cast<char>(i);
  EXPECT_EQ(idem::util::FromHex(idem::util::ToHex(every_byte)), every_byte);
  EXPECT_EQ(idem::util::FromHex("00FFaB"), std::string("\x00\xff\xab", 3));
  EXPECT_EQ(idem::util::FromHex(""), std::string());
  EXPECT_EQ(idem::util::FromHex("abc"), std::nullopt);  // odd
  EXPECT_EQ(idem::util::FromHex("0g"), std::nullopt);
  EXPECT_EQ(idem::util::FromHex("-1"), std::nullopt);
}

TEST(Escape, ControlsBecomeHexEscapesAndEscapingTwiceChangesNothing) {
  const std::string text = std::string("a\nb\x1b[31m\x7f\\x", 11);
  EXPECT_EQ(idem::EscapeControls(text), "a\\x0ab\\x1b[31m\\x7f\\x");
  EXPECT_EQ(idem::EscapeControls(idem::EscapeControls(text)), idem::EscapeControls(text));
}

// The one escape for data: readable UTF-8, unambiguous bytes (so `idem dump`, `idem get` and the
// library's messages show one key one way).
TEST(Escape, DataKeepsUtf8AndEscapesControlsMalformedBytesAndBackslashes) {
  EXPECT_EQ(idem::DisplayEscape("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac");
  EXPECT_EQ(idem::DisplayEscape(std::string("a\\b\0\x7f", 5)), "a\\\\b\\x00\\x7f");
  EXPECT_EQ(idem::DisplayEscape("\xc2\x85 \xff \xc3"), "\\xc2\\x85 \\xff \\xc3");
  // Unambiguous: the key holding the four characters \x00 is not the one holding a NUL.
  EXPECT_NE(idem::DisplayEscape("\\x00"), idem::DisplayEscape(std::string("\0", 1)));
}

// Messages name a key as `idem dump` shows it, in quotes, cut between two characters.
TEST(Escape, KeysShowAsTheCommandShowsThemCutBetweenCharacters) {
  using idem::EscapeKey;
  EXPECT_EQ(EscapeKey("caf\xc3\xa9\\1"), "\"caf\xc3\xa9\\\\1\"");
  EXPECT_EQ(EscapeKey(std::string("bin\0\xff", 5)), "\"bin\\x00\\xff\"");
  // 4 bytes of "a\xc3\xa9\xc3\xa9": the second character would be cut, so it is left out.
  EXPECT_EQ(EscapeKey("a\xc3\xa9\xc3\xa9", 4), "\"a\xc3\xa9...\"");
  EXPECT_EQ(EscapeKey("abcdef", 3), "\"abc...\"");
  EXPECT_EQ(EscapeKey("abc", 3), "\"abc\"");
}

TEST(Random, FillsBuffersOfAnySizeWithFreshBytes) {
  // Above 256 bytes getrandom may return short: the whole buffer must still be filled.
  std::vector<unsigned char> a(4096, 0), b(4096, 0);
  ASSERT_TRUE(idem::util::RandomBytes(a.data(), a.size()).ok());
  ASSERT_TRUE(idem::util::RandomBytes(b.data(), b.size()).ok());
  EXPECT_NE(a, b);
  // A zero byte in each of the last 64 positions would be a sign of a short fill (p = 2^-512).
  EXPECT_FALSE(std::all_of(a.end() - 64, a.end(), [](unsigned char c) { return c == 0; }));
  EXPECT_TRUE(idem::util::RandomBytes(nullptr, 0).ok());

  std::set<uint64_t> seeds;
  for (int i = 0; i < 100; ++i) seeds.insert(idem::util::RandomSeed());
  EXPECT_EQ(seeds.size(), 100u);
}

// What SpinUntilReady and the engine's write groups size themselves by: the cores this thread
// may run on, so that a container given 1 core of a large machine counts 1.
TEST(UsableCores, CountsTheCoresThisThreadMayRunOn) {
  cpu_set_t saved;
  ASSERT_EQ(::sched_getaffinity(0, sizeof saved, &saved), 0);
  EXPECT_EQ(idem::util::UsableCores(), static_cast<unsigned>(CPU_COUNT(&saved)));
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  EXPECT_EQ(idem::util::UsableCores(), 1u);
  ASSERT_EQ(::sched_setaffinity(0, sizeof saved, &saved), 0);
}

TEST(Backoff, DoublesUpToItsLongestPause) {
  idem::util::Backoff backoff(1ms, 50ms);
  std::vector<std::chrono::milliseconds> pauses;
  for (int i = 0; i < 9; ++i) pauses.push_back(backoff.Next());
  EXPECT_EQ(pauses, (std::vector<std::chrono::milliseconds>{1ms, 2ms, 4ms, 8ms, 16ms, 32ms, 50ms,
                                                            50ms, 50ms}));
}

TEST(Deadline, TimeLeftRoundsUpAndIsZeroOnlyOncePassed) {
  EXPECT_EQ(idem::util::TimeLeft(std::chrono::steady_clock::now() - 1s), 0ms);
  // Rounded up: a sleep of the time left, which never ends early, ends past the moment.
  const auto until = std::chrono::steady_clock::now() + 1500us;
  std::this_thread::sleep_for(idem::util::TimeLeft(until));
  EXPECT_GE(std::chrono::steady_clock::now(), until);
  EXPECT_EQ(idem::util::TimeLeft(until), 0ms);

  const idem::util::Deadline passed(0ms);
  EXPECT_TRUE(passed.Passed());
  EXPECT_EQ(passed.Left(), 0ms);
  EXPECT_EQ(passed.budget(), 0ms);
  const idem::util::Deadline later(1h);
  EXPECT_FALSE(later.Passed());
  EXPECT_GT(later.Left(), 59min);
  EXPECT_LE(later.Left(), 1h);
  EXPECT_GE(later.Elapsed(), 0ms);
  EXPECT_LT(later.Elapsed(), 1min);
}

TEST(Deadline, RetryUntilReturnsTheFirstValueAnAttemptGives) {
  int attempts = 0;
  const std::string got = idem::util::RetryUntil(
      idem::util::Deadline(1h), idem::util::Backoff(1ms, 1ms),
      [&]() -> std::optional<std::string> {
        if (++attempts < 3) return std::nullopt;
        return "third";
      },
      [](int /*attempts*/) -> std::string { return "gave up"; });
  EXPECT_EQ(got, "third");
  EXPECT_EQ(attempts, 3);
}

TEST(Deadline, RetryUntilMakesOneAttemptWhateverTheBudgetAndUsesTheBudgetWhole) {
  int attempts = 0;
  int counted = -1;
  std::chrono::steady_clock::time_point gave_up_at;
  const auto never = [&]() -> std::optional<int> {
    ++attempts;
    return std::nullopt;
  };
  const auto give_up = [&](int made) {
    counted = made;
    gave_up_at = std::chrono::steady_clock::now();
    return -1;
  };
  EXPECT_EQ(idem::util::RetryUntil(idem::util::Deadline(0ms), idem::util::Backoff(1ms, 1ms), never,
                                   give_up),
            -1);
  EXPECT_EQ(attempts, 1);
  EXPECT_EQ(counted, 1);

  // Pauses of 1, 2, 4, ... 32 ms come to 63 ms; the next (50 ms) is cut to the 37 ms left of the
  // budget of 100 ms, and the last attempt is made at the deadline: at most 8 attempts (fewer
  // when a sleep oversleeps on a busy machine), and no giving up before the deadline.
  attempts = 0;
  const idem::util::Deadline deadline(100ms);
  EXPECT_EQ(idem::util::RetryUntil(deadline, idem::util::Backoff(1ms, 50ms), never, give_up), -1);
  EXPECT_EQ(counted, attempts);
  EXPECT_GE(attempts, 2);
  EXPECT_LE(attempts, 8);
  EXPECT_GE(gave_up_at, deadline.at());
}

// What comes back just before the deadline is still found: a last attempt is made at it, even
// when the next pause of the backoff would have ended far past it.
TEST(Deadline, RetryUntilTriesOnceMoreAtTheDeadline) {
  const idem::util::Deadline deadline(100ms);
  const auto back_at = deadline.at() - 5ms;
  const std::string got = idem::util::RetryUntil(
      deadline, idem::util::Backoff(60ms, 60ms),
      [&]() -> std::optional<std::string> {
        if (std::chrono::steady_clock::now() < back_at) return std::nullopt;
        return "back";
      },
      [](int /*attempts*/) -> std::string { return "gave up"; });
  EXPECT_EQ(got, "back");
}

// The table's wire places are the order docs/format.md gives for "record :=" and "holder :=";
// the goldens in protocol_golden_test.cc pin the bytes themselves.
TEST(RecordFields, TheWireOrderIsTheDocumentedOne) {
  std::vector<std::string_view> names;
  idem::util::ForEachRecordField<idem::util::kWireOrder>(
      [&](auto row) { names.push_back(decltype(row)::field.name); });
  EXPECT_EQ(names, (std::vector<std::string_view>{
                       "key", "state", "timed_out", "type", "fingerprint", "result", "checkpoint",
                       "token", "attempts", "retryable", "created", "updated", "lease_deadline",
                       "expires", "pid", "process_start", "pid_scope", "request_id", "took_over"}));
}

TEST(RecordFields, EachFieldReadsAndWritesItsOwnMember) {
  idem::Record record;
  record.key = "k";
  record.holder.request_id = 42;
  record.token = 7;
  const idem::Record& shown = record;
  EXPECT_EQ(std::get<idem::util::RecordFieldIndex("key")>(idem::util::kRecordFields).Of(shown),
            "k");
  EXPECT_EQ(
      std::get<idem::util::RecordFieldIndex("request_id")>(idem::util::kRecordFields).Of(shown),
      42u);
  std::get<idem::util::RecordFieldIndex("token")>(idem::util::kRecordFields).Of(record) = 9;
  EXPECT_EQ(record.token, 9u);
  EXPECT_EQ(idem::util::RecordFieldIndex("colour"), idem::util::kRecordFieldCount);
  EXPECT_EQ(std::get<idem::util::RecordFieldIndex("token")>(idem::util::kRecordFields).Largest(),
            uint64_t{std::numeric_limits<int64_t>::max()});
  EXPECT_EQ(std::get<idem::util::RecordFieldIndex("pid")>(idem::util::kRecordFields).Largest(),
            uint64_t{std::numeric_limits<uint32_t>::max()});
}

TEST(Options, ZeroLeaseAndRetentionMeanTheDefaults) {
  idem::Options options;
  options.default_lease = 7s;
  options.default_retention = 9h;
  EXPECT_EQ(options.LeaseOrDefault(0ms), 7s);
  EXPECT_EQ(options.LeaseOrDefault(250ms), 250ms);
  EXPECT_EQ(options.RetentionOrDefault(0ms), 9h);
  EXPECT_EQ(options.RetentionOrDefault(1s), 1s);
}

// The rows' order is a contract: tools print counters in it, and processes sharing a store
// number counters by it on the socket (protocol_test pins those numbers).
TEST(Counters, TheTableListsEveryCounterOnceInItsFixedOrder) {
  std::vector<std::string> names;
  for (const idem::CounterInfo& counter : idem::kCounters) {
    names.emplace_back(counter.name);
    EXPECT_FALSE(counter.help.empty()) << counter.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{
                       "claims", "replays", "in_progress", "takeovers", "failed", "mismatches",
                       "lease_lost", "purged", "quota_refusals", "quota_exceeded", "completes",
                       "fails", "terminal_fails", "io_errors", "corruption_errors",
                       "timeout_errors", "busy_errors", "unavailable_errors", "stalls"}));
  idem::Counters counters;
  uint64_t value = 1;
  for (const idem::CounterInfo& counter : idem::kCounters) counters.*counter.field = value++;
  EXPECT_EQ(counters.claims, 1u);
  EXPECT_EQ(counters.purged, 8u);
}

}  // namespace

namespace {

// Reading the value of an error is a bug in the caller: caught at once in debug builds.
TEST(ResultDeathTest, ValueOfAnErrorAsserts) {
#ifdef NDEBUG
  GTEST_SKIP() << "assertions are compiled out (NDEBUG): the Debug builds (ASan, TSan) run this";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  idem::Result<int> error = idem::Status::NotFound("no such thing");
  EXPECT_DEATH(static_cast<void>(error.value()), "Result::value\\(\\) called on an error");
  EXPECT_DEATH(static_cast<void>(*error), "Result::value\\(\\) called on an error");
  idem::Result<int> value = 3;
  EXPECT_EQ(value.value(), 3);
#endif
}

}  // namespace
