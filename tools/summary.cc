#include "summary.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

namespace idem::cli {

Summary::Summary(const Context& ctx, const std::string& path) : ctx_(ctx), writer_(json_) {
  writer_.BeginObject();
  Text("command", ctx.command);
  Text("store", ctx.StoreName(path));
}

Summary& Summary::Count(std::string_view name, uint64_t value) {
  writer_.Key(name);
  writer_.Number(value);
  return *this;
}

Summary& Summary::Flag(std::string_view name, bool value) {
  writer_.Key(name);
  writer_.Bool(value);
  return *this;
}

Summary& Summary::Text(std::string_view name, std::string_view value) {
  writer_.Key(name);
  writer_.String(value);
  return *this;
}

void Summary::Print(const SummaryArgs& how, std::string_view sentence) {
  if (how.quiet) return;
  if (how.format != kSummaryJson) {
    fmt::print(ctx_.out, "{}\n", sentence);
    return;
  }
  writer_.EndObject();
  ctx_.out << json_ << '\n';
}

}  // namespace idem::cli
