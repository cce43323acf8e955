// What each fuzz target does with one input, shared by the libFuzzer targets (fuzz_*.cc) and by
// tests/system/fuzz_regression_test.cc, which replays the seed corpus and every saved crash through
// the same code in the normal build.
//
// Each check returns an empty string when the input is handled correctly, and otherwise a
// description of the broken property (a fuzz target aborts with it, so libFuzzer saves the
// input). Memory errors and undefined behaviour are the sanitizers' to find.

#ifndef IDEM_FUZZ_FUZZ_CHECKS_H_
#define IDEM_FUZZ_FUZZ_CHECKS_H_

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "backend/record_counts.h"
#include "cli.h"
#include "export_format.h"
#include "idem/record.h"
#include "idem/status.h"
#include "quick_json.h"
#include "sharing/protocol.h"
#include "storage/rocksdb/record_codec.h"

namespace idem::fuzz {

// ---- Record decoder --------------------------------------------------------------------------
//
// Input: u8 key length n, then n key bytes (fewer if the input ends), then the stored value.
// A value that decodes must encode to a value that decodes to an equal record.

inline std::string CheckRecordDecoder(std::string_view data) {
  if (data.empty()) return {};
  const std::size_t key_size =
      std::min<std::size_t>(static_cast<uint8_t>(data[0]), data.size() - 1);
  const std::string_view key = data.substr(1, key_size);
  const std::string_view value = data.substr(1 + key_size);

  Result<Record> decoded = storage::DecodeRecord(key, value);
  if (!decoded.ok()) {
    // A version above this library's is a newer release's record (kNewerVersion); anything
    // else undecodable is damage (kCorruption).
    const bool newer =
        !value.empty() && static_cast<uint8_t>(value[0]) > storage::kRecordFormatVersion;
    const Status::Code expected = newer ? Status::Code::kNewerVersion : Status::Code::kCorruption;
    if (decoded.status().code() != expected) {
      return "DecodeRecord failed with " + decoded.status().ToString() + ", not " +
             std::string(CodeName(expected));
    }
    return {};
  }
  const std::string encoded = storage::EncodeRecord(*decoded);
  Result<Record> again = storage::DecodeRecord(key, encoded);
  if (!again.ok()) {
    return "a decoded record re-encodes to a value that does not decode: " +
           again.status().ToString();
  }
  if (!(*again == *decoded)) return "a decoded record does not survive EncodeRecord + DecodeRecord";
  if (storage::PeekExpiresMicros(encoded) != storage::ToMicros(decoded->expires)) {
    return "PeekExpiresMicros disagrees with DecodeRecord on the expiry";
  }
  return {};
}

// ---- Socket frames ---------------------------------------------------------------------------
//
// Input: u8 selector, then a frame payload. Selector 0: a request, as the owner decodes it.
// Otherwise a response, as a client decodes it, whose body (when the status is OK) goes to the
// body decoder that the selector picks. Whatever decodes must encode back to the same bytes
// (requests) or to bytes that decode and encode again to the same bytes (bodies, whose records
// have more than one encoding).

namespace internal {

// Decode(Encode(decoded)) must succeed and encode again to the same bytes.
template <class T, class Encode, class Decode>
std::string CheckBodyRoundTrip(const char* what, const T& decoded, Encode encode, Decode decode) {
  const std::string encoded = encode(decoded);
  auto again = decode(encoded);
  if (!again.ok()) {
    return std::string(what) +
           ": a decoded body re-encodes to bytes that do not decode: " + again.status().ToString();
  }
  if (encode(*again) != encoded) {
    return std::string(what) + ": a decoded body does not survive encode + decode";
  }
  return {};
}

inline std::string CheckBody(uint8_t selector, std::string_view body) {
  switch (selector % 6) {
    case 0: {
      Result<Claim> claim = sharing::DecodeClaim(body);
      if (!claim.ok()) return {};
      return CheckBodyRoundTrip("DecodeClaim", *claim, sharing::EncodeClaim, sharing::DecodeClaim);
    }
    case 1: {
      Result<std::optional<Record>> record = sharing::DecodeOptionalRecord(body);
      if (!record.ok()) return {};
      return CheckBodyRoundTrip("DecodeOptionalRecord", *record, sharing::EncodeOptionalRecord,
                                sharing::DecodeOptionalRecord);
    }
    case 2: {
      Result<engine::ScanPage> page = sharing::DecodeScanPage(body);
      if (!page.ok()) return {};
      return CheckBodyRoundTrip("DecodeScanPage", *page, sharing::EncodeScanPage,
                                sharing::DecodeScanPage);
    }
    case 3: {
      Result<OwnerCounters> counters = sharing::DecodeCounters(body);
      if (!counters.ok()) return {};
      return CheckBodyRoundTrip("DecodeCounters", *counters, sharing::EncodeCounters,
                                sharing::DecodeCounters);
    }
    case 5: {
      Result<engine::Backend::Stats> stats = sharing::DecodeStats(body);
      if (!stats.ok()) return {};
      return CheckBodyRoundTrip("DecodeStats", *stats, sharing::EncodeStats, sharing::DecodeStats);
    }
    default: {
      Result<sharing::PurgeProgress> progress = sharing::DecodePurgeProgress(body);
      if (!progress.ok()) return {};
      const auto encoded = sharing::EncodePurgeProgress(*progress);
      Result<sharing::PurgeProgress> again = sharing::DecodePurgeProgress(encoded);
      if (!again.ok() || sharing::EncodePurgeProgress(*again) != encoded) {
        return "DecodePurgeProgress: a decoded body does not survive encode + decode";
      }
      return {};
    }
  }
}

}  // namespace internal

// ---- Kept record counts ----------------------------------------------------------------------
//
// Input: the record counts an owner keeps at a clean close for the next one (the meta value
// record_counts after its sequence number: backend::RecordCounts::Encode). Decode accepts the
// bytes or returns nullopt. Counts it accepts encode to bytes that decode again, and both count
// the same (CountInto; the pending records are kept in a hash map, so the bytes' order of them
// may differ), with the counts by state adding up to the records.

inline std::string CheckRecordCounts(std::string_view data) {
  std::optional<backend::RecordCounts> decoded = backend::RecordCounts::Decode(data);
  if (!decoded) return {};
  std::optional<backend::RecordCounts> again = backend::RecordCounts::Decode(decoded->Encode());
  if (!again) return "decoded counts re-encode to bytes that do not decode";
  const auto now = std::chrono::system_clock::time_point(std::chrono::hours(500'000));
  StoreStats first, second;
  decoded->CountInto(now, first);
  again->CountInto(now, second);
  if (first.records != second.records || first.by_state != second.by_state ||
      first.by_type != second.by_type) {
    return "decoded counts and their encoding decoded again count differently";
  }
  uint64_t by_state = 0;
  for (const auto& [state, count] : first.by_state) by_state += count;
  if (by_state != first.records) return "the counts by state do not add up to the records";
  return {};
}

inline std::string CheckFrameDecoder(std::string_view data) {
  if (data.empty()) return {};
  const auto selector = static_cast<uint8_t>(data[0]);
  const std::string_view frame = data.substr(1);

  if (selector == 0) {
    Result<sharing::Request> request = sharing::DecodeRequest(frame);
    if (!request.ok()) {
      if (request.status().code() != Status::Code::kInvalidArgument) {
        return "DecodeRequest failed with " + request.status().ToString() +
               ", not kInvalidArgument";
      }
      return {};
    }
    // A request has exactly one encoding, so it must come back byte for byte.
    if (sharing::EncodeRequest(*request) != frame) {
      return "a decoded request does not re-encode to the same bytes";
    }
    return {};
  }

  Status status;
  sharing::ResponseKind kind = sharing::ResponseKind::kAnswer;
  Result<std::string_view> body = sharing::DecodeResponse(frame, status, kind);
  if (!body.ok()) {
    if (body.status().code() != Status::Code::kUnavailable) {
      return "DecodeResponse failed with " + body.status().ToString() + ", not kUnavailable";
    }
    return {};
  }
  if (frame.empty() || static_cast<uint8_t>(frame[0]) != sharing::kProtocolVersion) {
    // Another version: read as a refusal, from its first three fields only.
    if (kind != sharing::ResponseKind::kRefusal || status.ok() || !body->empty()) {
      return "a response of another version is not a refusal with an error and no body";
    }
    return {};
  }
  if (body->data() < frame.data() || body->data() + body->size() != frame.data() + frame.size()) {
    return "DecodeResponse returned a body that is not the end of the frame";
  }
  if (kind != sharing::ResponseKind::kAnswer) {
    if (status.ok() || !body->empty()) return "a refusal or goodbye carries OK or a body";
    if (sharing::EncodeClosing(kind, status) != frame) {
      return "a decoded refusal or goodbye does not re-encode to the same bytes";
    }
    return {};
  }
  // A response's status and body come back byte for byte; a non-OK response carries no body.
  const std::string_view sent_body = status.ok() ? *body : std::string_view();
  const std::string_view head = frame.substr(0, frame.size() - body->size());
  if (sharing::EncodeResponse(status, sent_body) != std::string(head) + std::string(sent_body)) {
    return "a decoded response does not re-encode to the same bytes";
  }
  if (!status.ok()) return {};
  return internal::CheckBody(selector - 1, *body);
}

// ---- Import lines ----------------------------------------------------------------------------
//
// Input: one line of `idem import`'s input (tools/import_line.cc). ParseImportLine accepts it or
// refuses it with kInvalidArgument. What it accepts, written again as `idem export` writes it
// (RecordToExportJson, TableValueToExportJson), is accepted and reads back equal: import never
// takes a line whose record export could not give back. And the quick JSON reader
// (tools/quick_json.h) that reads most lines makes the same calls as nlohmann's sax_parse on
// every text it takes (CheckQuickJson).

namespace internal {

// A SAX handler that writes down every call, one line each.
struct JsonCalls {
  std::string calls;
  bool null() { return Add("null"); }
  bool boolean(bool value) { return Add(value ? "true" : "false"); }
  bool number_integer(int64_t value) { return Add("integer " + std::to_string(value)); }
  bool number_unsigned(uint64_t value) { return Add("unsigned " + std::to_string(value)); }
  bool number_float(double, const std::string& text) { return Add("float " + text); }
  bool string(std::string& value) { return Add(Sized("string", value)); }
  bool binary(nlohmann::json::binary_t&) { return Add("binary"); }
  bool start_object(std::size_t size) { return Add("{ " + std::to_string(size)); }
  bool end_object() { return Add("}"); }
  bool start_array(std::size_t size) { return Add("[ " + std::to_string(size)); }
  bool end_array() { return Add("]"); }
  bool key(std::string& name) { return Add(Sized("key", name)); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    return Add("error");
  }
  static std::string Sized(std::string_view call, std::string_view text) {
    return std::string(call) + " " + std::to_string(text.size()) + " " + std::string(text);
  }
  bool Add(std::string call) {
    calls += call;
    calls += '\n';
    return true;
  }
};

}  // namespace internal

// Empty when the quick reader leaves `data` to nlohmann (kUnsure), or reads it with the calls
// nlohmann makes; else what differs.
inline std::string CheckQuickJson(std::string_view data) {
  internal::JsonCalls quick;
  const cli::QuickJson read = cli::ReadQuickJson(data, quick);
  if (read == cli::QuickJson::kUnsure) return {};
  if (read != cli::QuickJson::kRead) return "the quick reader stopped, but no call returned false";
  internal::JsonCalls slow;
  if (!nlohmann::json::sax_parse(data, &slow)) {
    return "the quick reader took a text nlohmann refuses:\n" + std::string(data);
  }
  if (quick.calls != slow.calls) {
    return "the quick reader's calls differ from nlohmann's:\n" + quick.calls + "--- nlohmann:\n" +
           slow.calls;
  }
  return {};
}

inline std::string CheckImportLine(std::string_view data) {
  if (std::string quick = CheckQuickJson(data); !quick.empty()) return quick;
  const auto now = std::chrono::system_clock::time_point(std::chrono::hours(500'000));
  Result<cli::ImportLine> parsed = cli::ParseImportLine(data, now);
  if (!parsed.ok()) {
    if (parsed.status().code() != Status::Code::kInvalidArgument) {
      return "ParseImportLine failed with " + parsed.status().ToString() + ", not kInvalidArgument";
    }
    return {};
  }
  std::string exported;
  if (const auto* record = std::get_if<Record>(&*parsed)) {
    exported = cli::RecordToExportJson(*record);
  } else {
    const auto& value = std::get<cli::ExportedTableValue>(*parsed);
    exported = cli::TableValueToExportJson(
        value.table, value.key, TableValue{.value = value.value, .version = value.version});
  }
  Result<cli::ImportLine> again = cli::ParseImportLine(exported, now);
  if (!again.ok()) {
    return "an accepted line, exported, is refused: " + again.status().message() + "\n" + exported;
  }
  if (const auto* record = std::get_if<Record>(&*parsed)) {
    const auto* record_again = std::get_if<Record>(&*again);
    if (record_again == nullptr || !(*record_again == *record)) {
      return "an accepted record, exported, reads back different:\n" + exported;
    }
    return {};
  }
  const auto& value = std::get<cli::ExportedTableValue>(*parsed);
  const auto* value_again = std::get_if<cli::ExportedTableValue>(&*again);
  if (value_again == nullptr || value_again->table != value.table ||
      value_again->key != value.key || value_again->value != value.value ||
      value_again->version != value.version) {
    return "an accepted table value, exported, reads back different:\n" + exported;
  }
  return {};
}

// ---- The command line ------------------------------------------------------------------------
//
// Input: the arguments after "idem", separated by NUL bytes (argv words can hold any other
// byte). No store is ever opened: every word that names an existing file or directory, or holds
// a '/', is replaced by kNoStorePath, a path that cannot exist (a directory under /dev/null), so
// the commands that get past their argument checks fail to open it with exit 3; `--create`
// (import) is dropped, so that no store is made either. Commands that read standard input
// (import) open the store first, so they never get that far. That keeps the
// fuzzer away from real stores whatever argument position CLI11 takes for PATH.

inline constexpr const char* kNoStorePath = "/dev/null/idem-fuzz";
inline constexpr std::size_t kMaxCliWords = 64;

inline std::vector<std::string> CliWords(std::string_view data) {
  std::vector<std::string> words = {"idem"};
  while (!data.empty() && words.size() <= kMaxCliWords) {
    const std::size_t end = data.find('\0');
    std::string word(data.substr(0, end));
    struct stat info {};
    if (word.find('/') != std::string::npos || ::stat(word.c_str(), &info) == 0) {
      word = kNoStorePath;
    }
    // The one flag that lets a command make a store (import --create) would make one in the
    // current directory under any other word: it is dropped.
    if (!word.starts_with("--create")) words.push_back(std::move(word));
    if (end == std::string_view::npos) break;
    data.remove_prefix(end + 1);
  }
  return words;
}

inline std::string CheckCli(std::string_view data) {
  std::vector<std::string> words = CliWords(data);
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);

  std::ostringstream out;
  std::ostringstream err;
  const int code = cli::Run(static_cast<int>(words.size()), argv.data(), out, err);
  if (code < cli::kExitOk || code > cli::kExitStoreError) {
    return "idem exited " + std::to_string(code) + ", not 0-3";
  }
  if (code == cli::kExitUsage || code == cli::kExitStoreError) {
    if (err.str().empty()) return "idem exited " + std::to_string(code) + " with nothing on stderr";
  }
  return {};
}

}  // namespace idem::fuzz

#endif  // IDEM_FUZZ_FUZZ_CHECKS_H_
