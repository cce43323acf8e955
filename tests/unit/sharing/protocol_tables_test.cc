// The wire protocol's application-table messages (sharing/protocol.h, docs/format.md): a
// Transition's writes and required keys, the table reads and their answers.

#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "sharing/protocol.h"

namespace idem::sharing {
namespace {

std::string Bytes(const char* bytes, std::size_t size) { return std::string(bytes, size); }

// Version 8's table messages (docs/format.md): a Transition's writes after its fields, the
// GetValue and ScanTable requests and their answers, status code 13; exact bytes, round trips,
// and the flags refused above 1.
TEST(Protocol, TableWritesTravelWithTheTransitionAndTablesAreReadByTwoOps) {
  EXPECT_GE(kProtocolVersion, 8);
  idem::WriteSet writes;
  writes.Put("t", "k", "v", 3);
  writes.Delete("t", "d");
  engine::TransitionCall complete{.key = "m"};
  complete.request = {.kind = idem::engine::TransitionKind::kComplete, .token = 9, .payload = "r"};
  complete.writes = &writes;
  const std::string expected = std::string(1, static_cast<char>(kProtocolVersion)) +
                               Bytes(
                                   "\x02"                    // op 2, Transition
                                   "\x00"                    // kind: Complete
                                   "\x01\0\0\0m"             // key
                                   "\x09\0\0\0\0\0\0\0"      // token
                                   "\x01\0\0\0r"             // payload
                                   "\x00"                    // failure
                                   "\0\0\0\0\0\0\0\0"        // lease, ms
                                   "\x00"                    // durability: kSync
                                   "\x02\0\0\0"              // writes
                                   "\x01\0\0\0t\x01\0\0\0k"  // table, key
                                   "\x01\x01\0\0\0v"         // has value, value
                                   "\x01\x03\0\0\0\0\0\0\0"  // has if_version, if_version
                                   "\x01\0\0\0t\x01\0\0\0d"  // table, key
                                   "\x00"                    // no value: a delete
                                   "\x00"                    // unconditional
                                   "\0\0\0\0",               // requirements (version 10)
                                   75);
  EXPECT_EQ(EncodeRequest(TransitionMessage{complete, {}}), expected);
  Result<Request> decoded = DecodeRequest(expected);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  const auto& message = std::get<TransitionMessage>(*decoded);
  EXPECT_EQ(message.call.writes, nullptr);
  ASSERT_EQ(message.writes.writes().size(), 2u);
  const auto& put = message.writes.writes()[0];
  EXPECT_EQ(put.table, "t");
  EXPECT_EQ(put.key, "k");
  EXPECT_EQ(put.value, std::optional<std::string>("v"));
  EXPECT_EQ(put.if_version, std::optional<uint64_t>(3));
  const auto& removal = message.writes.writes()[1];
  EXPECT_EQ(removal.value, std::nullopt);
  EXPECT_EQ(removal.if_version, std::nullopt);
  // A flag above 1, and a version 7 Transition (no writes): refused.
  std::string bad_flag = expected;
  bad_flag[bad_flag.size() - 5] = '\x02';
  EXPECT_EQ(DecodeRequest(bad_flag).status().message(),
            "malformed request: a field is out of range (op 2)");
  EXPECT_EQ(DecodeRequest(expected.substr(0, 31)).status().message(),
            "malformed request: fields truncated or trailing bytes (op 2)");

  const std::string get_value =
      std::string(1, static_cast<char>(kProtocolVersion)) + Bytes("\x09\x01\0\0\0t\x01\0\0\0k", 11);
  EXPECT_EQ(EncodeRequest(GetValueMessage{"t", "k"}), get_value);
  decoded = DecodeRequest(get_value);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(std::get<GetValueMessage>(*decoded).key, "k");
  const std::string scan_frame =
      EncodeRequest(ScanTableMessage{"t", {.prefix = "p", .start_after = "s"}, 5});
  decoded = DecodeRequest(scan_frame);  // its views point into the frame
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  const auto& scan = std::get<ScanTableMessage>(*decoded);
  EXPECT_EQ(scan.table, "t");
  EXPECT_EQ(scan.options.prefix, "p");
  EXPECT_EQ(scan.options.start_after, "s");
  EXPECT_EQ(scan.limit, 5u);

  const std::string value = Bytes("\x01\x02\0\0\0ab\x04\0\0\0\0\0\0\0", 15);
  EXPECT_EQ(EncodeTableValue({"ab", 4}), value);
  EXPECT_EQ(DecodeTableValue(value).value(), (idem::TableValue{"ab", 4}));
  EXPECT_EQ(DecodeTableValue(Bytes("\x00\x05\0\0\0\0\0\0\0", 9)).value(),
            (idem::TableValue{std::nullopt, 5}));
  EXPECT_EQ(DecodeTableValue(Bytes("\x02\x05\0\0\0\0\0\0\0", 9)).status().code(),
            Status::Code::kUnavailable);
  engine::TablePage page;
  page.values = {{"a", {"1", 1}}, {"b", {"2", 7}}};
  page.more = true;
  Result<engine::TablePage> round = DecodeTablePage(EncodeTablePage(page));
  ASSERT_TRUE(round.ok()) << round.status().ToString();
  EXPECT_EQ(round->values, page.values);
  EXPECT_TRUE(round->more);

  decoded = DecodeRequest(EncodeRequest(ListTablesMessage{}));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(std::holds_alternative<ListTablesMessage>(*decoded));
  const std::vector<std::string> names = {"balances", "log"};
  EXPECT_EQ(EncodeTableNames(names), Bytes("\x02\0\0\0\x08\0\0\0balances\x03\0\0\0log", 23));
  EXPECT_EQ(DecodeTableNames(EncodeTableNames(names)).value(), names);
  EXPECT_EQ(DecodeTableNames(Bytes("\x02\0\0\0", 4)).status().code(), Status::Code::kUnavailable);

  Status status;
  ResponseKind kind;
  ASSERT_TRUE(DecodeResponse(EncodeResponse(Status::Conflict("changed")), status, kind).ok());
  EXPECT_EQ(status.code(), Status::Code::kConflict);
  EXPECT_EQ(status.message(), "changed");
}

// Version 10: a Transition's required keys (WriteSet::Require) follow its writes, each with the
// version it must still be at (0 included); they round-trip, and a frame cut inside them is
// refused rather than read without them.
TEST(Protocol, RequiredKeysTravelWithTheTransition) {
  EXPECT_GE(kProtocolVersion, 10);
  idem::WriteSet writes;
  writes.Put("t", "k", "v", 3);
  writes.Require("t", "r", 7);
  writes.Require("u", "never", 0);
  engine::TransitionCall complete{.key = "m"};
  complete.request = {.kind = idem::engine::TransitionKind::kComplete, .token = 9, .payload = "r"};
  complete.writes = &writes;
  const std::string frame = EncodeRequest(TransitionMessage{complete, {}});
  const std::string requirements = Bytes(
      "\x02\0\0\0"                                   // requirements
      "\x01\0\0\0t\x01\0\0\0r\x07\0\0\0\0\0\0\0"     // table, key, version
      "\x01\0\0\0u\x05\0\0\0never\0\0\0\0\0\0\0\0",  // table, key, version 0
      4 + 18 + 22);
  ASSERT_GT(frame.size(), requirements.size());
  EXPECT_EQ(frame.substr(frame.size() - requirements.size()), requirements);
  Result<Request> decoded = DecodeRequest(frame);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  const auto& message = std::get<TransitionMessage>(*decoded);
  ASSERT_EQ(message.writes.writes().size(), 1u);
  ASSERT_EQ(message.writes.requirements().size(), 2u);
  EXPECT_EQ(message.writes.requirements()[0].table, "t");
  EXPECT_EQ(message.writes.requirements()[0].key, "r");
  EXPECT_EQ(message.writes.requirements()[0].version, 7u);
  EXPECT_EQ(message.writes.requirements()[1].table, "u");
  EXPECT_EQ(message.writes.requirements()[1].key, "never");
  EXPECT_EQ(message.writes.requirements()[1].version, 0u);
  EXPECT_FALSE(message.writes.empty());
  // Encoded again from the decoded message (the owner's view): the same bytes.
  EXPECT_EQ(EncodeRequest(message), frame);
  // A version 9 peer's Transition (writes without requirements) is refused by its version, never
  // read as one without requirements; and a version 10 frame cut inside its requirements, or
  // without them, is refused too.
  std::string version_nine = frame.substr(0, frame.size() - requirements.size());
  version_nine[0] = 9;
  EXPECT_EQ(DecodeRequest(version_nine).status().message(),
            "unsupported protocol version 9 (this owner speaks " +
                std::to_string(kProtocolVersion) + ")");
  for (const std::size_t cut : {std::size_t{1}, std::size_t{8}, requirements.size()}) {
    EXPECT_EQ(DecodeRequest(frame.substr(0, frame.size() - cut)).status().message(),
              "malformed request: fields truncated or trailing bytes (op 2)");
  }
}

}  // namespace
}  // namespace idem::sharing

namespace idem::sharing {
namespace {

// Version 11: Execute's key reservations, op 14 Reserve (the claim, its hold and wait, its keys)
// and op 15 Unreserve; exact bytes, round trips, the answer's one byte, and a hold of 0 or a
// flag above 1 refused.
TEST(Protocol, KeyReservationsTravelAsTwoOps) {
  EXPECT_GE(kProtocolVersion, 11);
  engine::ReserveCall call{.claim_key = "m",
                           .token = 9,
                           .hold = std::chrono::milliseconds(5),
                           .wait = std::chrono::milliseconds(2)};
  call.keys = {{"t", "a"}, {"u", "b"}};
  const std::string expected = std::string(1, static_cast<char>(kProtocolVersion)) +
                               Bytes(
                                   "\x0e"                    // op 14, Reserve
                                   "\x01\0\0\0m"             // claim key
                                   "\x09\0\0\0\0\0\0\0"      // token
                                   "\x05\0\0\0\0\0\0\0"      // hold, ms
                                   "\x02\0\0\0\0\0\0\0"      // wait, ms
                                   "\x02\0\0\0"              // keys
                                   "\x01\0\0\0t\x01\0\0\0a"  // table, key
                                   "\x01\0\0\0u\x01\0\0\0b",
                                   54);
  EXPECT_EQ(EncodeRequest(ReserveMessage{call}), expected);
  Result<Request> decoded = DecodeRequest(expected);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  const engine::ReserveCall& read = std::get<ReserveMessage>(*decoded).call;
  EXPECT_EQ(read.claim_key, "m");
  EXPECT_EQ(read.token, 9u);
  EXPECT_EQ(read.hold, std::chrono::milliseconds(5));
  EXPECT_EQ(read.wait, std::chrono::milliseconds(2));
  EXPECT_EQ(read.keys, call.keys);
  std::string no_hold = expected;
  no_hold[15] = '\0';
  EXPECT_EQ(DecodeRequest(no_hold).status().message(),
            "malformed request: a field is out of range (op 14)");
  EXPECT_EQ(DecodeRequest(expected.substr(0, expected.size() - 1)).status().message(),
            "malformed request: fields truncated or trailing bytes (op 14)");

  const std::string unreserve = std::string(1, static_cast<char>(kProtocolVersion)) +
                                Bytes("\x0f\x01\0\0\0m\x09\0\0\0\0\0\0\0", 14);
  EXPECT_EQ(EncodeRequest(UnreserveMessage{"m", 9}), unreserve);
  decoded = DecodeRequest(unreserve);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(std::get<UnreserveMessage>(*decoded).claim_key, "m");
  EXPECT_EQ(std::get<UnreserveMessage>(*decoded).token, 9u);

  EXPECT_EQ(EncodeGranted(true), Bytes("\x01", 1));
  EXPECT_EQ(DecodeGranted(EncodeGranted(false)).value(), false);
  EXPECT_EQ(DecodeGranted(Bytes("\x02", 1)).status().code(), Status::Code::kUnavailable);
}

}  // namespace
}  // namespace idem::sharing
