// The interface's destructors, out of line: the vtables of ReadView and Storage get one home,
// and the interface layer one source of its own (an object library needs one).

#include "storage/storage.h"

namespace idem::storage {

ReadView::~ReadView() = default;
Storage::~Storage() = default;

Result<bool> Storage::Forget(std::string_view key, Durability durability,
                             const engine::AsRead* as_read) {
  Result<ReadResult> read = Read(key);
  if (read.ok()) {
    engine::MakeVisible(read->record, read->now);
    if (!read->record) return false;
    if (as_read && !engine::StillAsRead(*read->record, *as_read)) {
      return engine::ChangedSinceRead(key);
    }
  } else if (as_read || (read.status().code() != Status::Code::kCorruption &&
                         read.status().code() != Status::Code::kNewerVersion)) {
    return read.status();
  }
  return Remove(key, durability, as_read);
}

Result<CheckReport> Storage::Check() {
  CheckReport report;
  const Status read = Scan(ScanOptions{}, [&report](Record&&, TimePoint) {
    ++report.records;
    return true;
  });
  // A record that does not decode ends the scan: the records after it are not checked.
  if (read.code() == Status::Code::kCorruption || read.code() == Status::Code::kNewerVersion) {
    report.Add("read", "", read.message());
    return report;
  }
  IDEM_RETURN_IF_ERROR(read);
  return report;
}

}  // namespace idem::storage
