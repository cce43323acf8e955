// The last line of the commands that write a store or copy one (purge, forget, backup, export,
// import): a sentence for people, or with --format json one JSON object of the same figures, for
// scripts and monitoring (docs/operations.md, "Summaries").

#ifndef IDEM_TOOLS_SUMMARY_H_
#define IDEM_TOOLS_SUMMARY_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "commands.h"
#include "context.h"
#include "json_writer.h"

namespace idem::cli {

// The values of --format on those commands.
inline constexpr std::string_view kSummaryText = "text";
inline constexpr std::string_view kSummaryJson = "json";

class Summary {
 public:
  // {"command": ctx.command, "store": the store's name, ...}.
  Summary(const Context& ctx, const std::string& path);
  Summary(const Summary&) = delete;  // writer_ writes into json_
  Summary& operator=(const Summary&) = delete;

  Summary& Count(std::string_view name, uint64_t value);
  Summary& Flag(std::string_view name, bool value);
  // Bytes as JsonWriter writes them (a byte that is not UTF-8 as \u00XX).
  Summary& Text(std::string_view name, std::string_view value);

  // Writes `sentence`, or the object when `how` says json, and a newline, on ctx.out; nothing
  // when `how` is quiet. Once.
  void Print(const SummaryArgs& how, std::string_view sentence);

 private:
  const Context& ctx_;
  std::string json_;
  JsonWriter writer_;
};

}  // namespace idem::cli

#endif  // IDEM_TOOLS_SUMMARY_H_
