#include "idem/record.h"

#include "idem/store.h"

namespace idem {

std::string_view StateName(State state) {
  switch (state) {
    case State::kPending:
      return "pending";
    case State::kDone:
      return "done";
    case State::kFailed:
      return "failed";
  }
  return "unknown";
}

std::string_view DisplayState(const Record& record) {
  return record.timed_out ? "timeout" : StateName(record.state);
}

std::string_view OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kAcquired:
      return "acquired";
    case Outcome::kReplay:
      return "replay";
    case Outcome::kInProgress:
      return "in_progress";
    case Outcome::kFailed:
      return "failed";
    case Outcome::kMismatch:
      return "mismatch";
  }
  return "unknown";
}

}  // namespace idem
