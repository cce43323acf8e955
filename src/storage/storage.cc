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

}  // namespace idem::storage
