#include "idem/status.h"

#include <fmt/format.h>

namespace idem {

std::string_view CodeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk:
      return "OK";
    case Status::Code::kInvalidArgument:
      return "InvalidArgument";
    case Status::Code::kNotFound:
      return "NotFound";
    case Status::Code::kInProgress:
      return "InProgress";
    case Status::Code::kMismatch:
      return "Mismatch";
    case Status::Code::kFailed:
      return "Failed";
    case Status::Code::kLeaseLost:
      return "LeaseLost";
    case Status::Code::kBusy:
      return "Busy";
    case Status::Code::kTimedOut:
      return "TimedOut";
    case Status::Code::kIOError:
      return "IOError";
    case Status::Code::kCorruption:
      return "Corruption";
    case Status::Code::kUnavailable:
      return "Unavailable";
    case Status::Code::kNewerVersion:
      return "NewerVersion";
    case Status::Code::kConflict:
      return "Conflict";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return fmt::format("{}: {}", CodeName(code_), message_);
}

}  // namespace idem
