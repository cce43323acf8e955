// The quick JSON reader of `idem import` (tools/quick_json.h): the texts it reads itself make the
// same SAX calls as nlohmann's sax_parse (fuzz/fuzz_checks.h's CheckQuickJson, which the import
// line's fuzz target runs on every input), and everything it does not take is left to nlohmann,
// whose errors the command reports.

#include "quick_json.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "fuzz_checks.h"

namespace {

using idem::cli::QuickJson;

QuickJson QuickRead(std::string_view text) {
  idem::fuzz::internal::JsonCalls calls;
  return idem::cli::ReadQuickJson(text, calls);
}

TEST(QuickJson, ReadsWhatExportWritesWithNlohmannsCalls) {
  const std::string_view taken[] = {
      R"({"key":"k1","state":"done","token":18446744073709551615,"retryable":false,)"
      R"("holder":{"pid":0,"took_over":true},"checkpoint":null,"result":"ok"})",
      R"({"key":{"hex":"00ff"},"result":"a \"quoted\" \\ \/ \b\f\n\r\t text"})",
      "{\"key\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xef\xbf\xbf \xf4\x8f\xbf\xbf\"}",
      " \t{ \"a\" : [ 1 , [ ] , { } , [ true , false , null ] ] , \"b\" : 0 }\r\n ",
      R"({"key":"\u0041\u00e9\u20AC\ud83d\ude00 \u0000 \u001f \uFFFF"})",
      "7",
      "\"just a string\"",
      "[]",
      "{}",
      "0",
      "\"\x7f\"",  // DEL needs no escape
  };
  for (std::string_view text : taken) {
    EXPECT_EQ(QuickRead(text), QuickJson::kRead) << text;
    EXPECT_EQ(idem::fuzz::CheckQuickJson(text), "") << text;
  }
}

TEST(QuickJson, LeavesEverythingElseToNlohmann) {
  const std::string_view left[] = {
      // What nlohmann reads but the quick reader does not.
      R"({"token":-1})",
      R"({"token":1.5})",
      R"({"token":1e3})",
      R"({"token":18446744073709551616})",
      R"([[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]])",
      // Errors, whose messages stay nlohmann's.
      "",
      " ",
      "{",
      "{\"a\"}",
      "{\"a\":}",
      "{\"a\":1,}",
      "[1,]",
      "{\"a\":1}x",
      "{\"a\":1} {}",
      "{'a':1}",
      "{\"a\":01}",
      "{\"a\":tru}",
      "{\"a\":nul}",
      "{\"a\":\"x}",
      "{\"a\":\"\\x\"}",
      "{\"a\":\"\x01\"}",
      "{\"a\":\"\xc0\xaf\"}",
      "{\"a\":\"\xed\xa0\x80\"}",
      "{\"a\":\"\xf4\x90\x80\x80\"}",
      "{\"a\":\"\xe2\x82\"}",
      "{\"a\":\"\x80\"}",
      "/* c */ {}",
      "{\"a\":1 /* c */}",
      "[1 2]",
      "{\"a\" 1}",
      "{1:2}",
      // \u escapes that are not characters: a lone or reversed surrogate, too few or bad digits.
      R"(["\ud83d"])",
      R"(["\ude00\ud83d"])",
      R"(["\ud83d\u0041"])",
      R"(["\ud83dx"])",
      R"(["\u12"])",
      R"(["\u12G4"])",
      R"(["\u"])",
  };
  for (std::string_view text : left) {
    EXPECT_EQ(QuickRead(text), QuickJson::kUnsure) << text;
  }
}

// nlohmann's depth is unbounded; the quick reader's is kQuickJsonDepth, and one level less is
// still its own.
TEST(QuickJson, ReadsNestingUpToItsDepth) {
  const std::size_t depth = idem::cli::kQuickJsonDepth;
  const std::string deepest = std::string(depth, '[') + "1" + std::string(depth, ']');
  EXPECT_EQ(QuickRead(deepest), QuickJson::kRead);
  EXPECT_EQ(idem::fuzz::CheckQuickJson(deepest), "");
  const std::string deeper = std::string(depth + 1, '[') + "1" + std::string(depth + 1, ']');
  EXPECT_EQ(QuickRead(deeper), QuickJson::kUnsure);
}

// A handler that says stop is obeyed at once, as nlohmann's sax_parse obeys it.
TEST(QuickJson, StopsWhenTheHandlerSaysSo) {
  struct StopAtKey : idem::fuzz::internal::JsonCalls {
    bool key(std::string&) { return false; }
  } handler;
  EXPECT_EQ(idem::cli::ReadQuickJson(R"({"a":1})", handler), QuickJson::kStopped);
  EXPECT_EQ(handler.calls, "{ 18446744073709551615\n");
}

}  // namespace
