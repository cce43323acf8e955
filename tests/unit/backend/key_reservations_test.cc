// KeyReservations (backend/key_reservations.h): the grants in arrival order, all of a request's
// keys at once; the refusal of other claims' commits; the end of a reservation by Release, by a
// commit's check of its own claim, and by its hold.

#include "backend/key_reservations.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "support/test_util.h"

namespace idem::backend {
namespace {

using std::chrono::milliseconds;

engine::ReserveCall Call(std::string_view claim, std::vector<TableKey> keys,
                         milliseconds hold = std::chrono::minutes(1),
                         milliseconds wait = milliseconds(0)) {
  return {.claim_key = claim, .token = 1, .keys = std::move(keys), .hold = hold, .wait = wait};
}

WriteSet Writing(std::string_view key) {
  WriteSet writes;
  writes.Put("t", key, "v");
  return writes;
}

// A wide request queued behind a holder of one of its keys keeps later narrow requests for its
// other keys waiting: it is not starved by them, and it is granted all at once when the holder
// releases. A request for keys nobody wants is granted at once, whatever waits.
TEST(KeyReservations, AnEarlierWaitingRequestIsServedBeforeLaterOnesForItsKeys) {
  KeyReservations reservations;
  EXPECT_TRUE(reservations.Reserve(Call("holder", {{"t", "a"}})));
  EXPECT_FALSE(reservations.Reserve(Call("wide", {{"t", "a"}, {"t", "b"}, {"t", "c"}})));
  EXPECT_FALSE(reservations.Reserve(Call("narrow", {{"t", "b"}})));
  EXPECT_TRUE(reservations.Reserve(Call("elsewhere", {{"t", "z"}})));

  // The wide one waits for its grant in another thread; the holder's release grants it.
  auto wide = std::async(std::launch::async, [&] {
    return reservations.Reserve(Call("wide", {{"t", "a"}, {"t", "b"}, {"t", "c"}},
                                     std::chrono::minutes(1), std::chrono::seconds(20)));
  });
  std::this_thread::sleep_for(milliseconds(50));
  reservations.Release("holder", 1);
  EXPECT_TRUE(wide.get());
  EXPECT_FALSE(reservations.Reserve(Call("narrow", {{"t", "b"}})));
  reservations.Release("wide", 1);
  EXPECT_TRUE(reservations.Reserve(Call("narrow", {{"t", "b"}})));
}

// While a key is reserved, another claim's commit that writes it is refused, naming the key; the
// holder's own commit, and one that only requires the key, are not.
TEST(KeyReservations, OnlyTheHolderWritesAReservedKey) {
  KeyReservations reservations;
  EXPECT_OK(reservations.CheckCommit("other", 1, Writing("a")));
  ASSERT_TRUE(reservations.Reserve(Call("holder", {{"t", "a"}})));
  const Status refused = reservations.CheckCommit("other", 1, Writing("a"));
  EXPECT_EQ(refused.code(), Status::Code::kConflict);
  EXPECT_NE(refused.message().find("key \"a\" of table t is reserved by another Execute"),
            std::string::npos)
      << refused.message();
  // Another token of the same record key is another claim (one taken over).
  EXPECT_EQ(reservations.CheckCommit("holder", 2, Writing("a")).code(), Status::Code::kConflict);
  EXPECT_OK(reservations.CheckCommit("holder", 1, Writing("a")));
  EXPECT_OK(reservations.CheckCommit("other", 1, Writing("b")));
  WriteSet reading;
  reading.Require("t", "a", 3);
  EXPECT_OK(reservations.CheckCommit("other", 1, reading));
  reservations.Release("holder", 1);
  EXPECT_OK(reservations.CheckCommit("other", 1, Writing("a")));
}

// A holder that never releases keeps its keys one hold after its grant, no longer; a request that
// asks for more keys than its claim holds gives them up and queues again for all of them.
TEST(KeyReservations, AReservationLapsesAfterItsHoldAndGrowsByQueueingAgain) {
  KeyReservations reservations;
  ASSERT_TRUE(reservations.Reserve(Call("hung", {{"t", "a"}}, milliseconds(100))));
  EXPECT_FALSE(reservations.Reserve(Call("next", {{"t", "a"}})));
  const auto asked = std::chrono::steady_clock::now();
  EXPECT_TRUE(reservations.Reserve(
      Call("next", {{"t", "a"}}, std::chrono::minutes(1), std::chrono::seconds(20))));
  // Granted when the hold lapsed, not at the end of the wait.
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::seconds(10));
  EXPECT_EQ(reservations.CheckCommit("hung", 1, Writing("a")).code(), Status::Code::kConflict);

  EXPECT_FALSE(reservations.Reserve(Call("grows", {{"t", "b"}, {"t", "a"}})));
  ASSERT_TRUE(reservations.Reserve(Call("small", {{"t", "c"}})));
  // Growing from {c} to {c, a}: "small" gives up c and waits behind "grows" for a.
  EXPECT_FALSE(reservations.Reserve(Call("small", {{"t", "c"}, {"t", "a"}})));
  EXPECT_OK(reservations.CheckCommit("other", 1, Writing("c")));
  reservations.Release("next", 1);
  EXPECT_TRUE(reservations.Reserve(Call("grows", {{"t", "b"}, {"t", "a"}})));
  EXPECT_FALSE(reservations.Reserve(Call("small", {{"t", "c"}, {"t", "a"}})));
}

}  // namespace
}  // namespace idem::backend
