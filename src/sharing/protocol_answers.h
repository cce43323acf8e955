// The bodies of the owner's answers (sharing/protocol.h, docs/format.md): a claim, a record,
// pages of a scan, table values, counters, a job's progress, each with its encoder and decoder
// (protocol_answers.cc). An op names its answer's type and codec (sharing/protocol_ops.h).

#ifndef IDEM_SHARING_PROTOCOL_ANSWERS_H_
#define IDEM_SHARING_PROTOCOL_ANSWERS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/backend.h"

namespace idem::sharing {

// The answer to a Purge and to a Backup request.
struct PurgeProgress {
  uint64_t count = 0;  // records purged (or counted, in a dry run) so far
  bool done = false;   // true: count is the result
  // How many records the purge expects to visit, once counted (only when the client asked).
  std::optional<uint64_t> total;
};

std::string EncodeClaim(const Claim& claim);
Result<Claim> DecodeClaim(std::string_view body);
std::string EncodeOptionalRecord(const std::optional<Record>& record);
Result<std::optional<Record>> DecodeOptionalRecord(std::string_view body);
std::string EncodeScanPage(const engine::ScanPage& page);
Result<engine::ScanPage> DecodeScanPage(std::string_view body);
std::string EncodeTableValue(const TableValue& value);
Result<TableValue> DecodeTableValue(std::string_view body);
std::string EncodeTablePage(const engine::TablePage& page);
Result<engine::TablePage> DecodeTablePage(std::string_view body);
std::string EncodeGranted(bool granted);
Result<bool> DecodeGranted(std::string_view body);
std::string EncodeViewId(uint64_t view);
Result<uint64_t> DecodeViewId(std::string_view body);
std::string EncodeTableNames(const std::vector<std::string>& names);
Result<std::vector<std::string>> DecodeTableNames(std::string_view body);
// The owner's counters and since when it has owned the store (OwnerCounters::since; live and
// pid are the client's to fill in).
std::string EncodeCounters(const OwnerCounters& counters);
Result<OwnerCounters> DecodeCounters(std::string_view body);
// The owner's Backend::GetStats: the engine's health, and the records' figures when it keeps them.
std::string EncodeStats(const engine::Backend::Stats& stats);
Result<engine::Backend::Stats> DecodeStats(std::string_view body);
std::string EncodePurgeProgress(const PurgeProgress& progress);
Result<PurgeProgress> DecodePurgeProgress(std::string_view body);

// An op's answer: the value an OK response's body carries, and its codec.
template <class T, auto kEncode, auto kDecode>
struct AnswerCodec {
  using Value = T;
  static std::string Encode(const T& value) { return kEncode(value); }
  static Result<T> Decode(std::string_view body) { return kDecode(body); }
};
// An op answered by the status alone.
struct NoAnswer {};

}  // namespace idem::sharing

#endif  // IDEM_SHARING_PROTOCOL_ANSWERS_H_
