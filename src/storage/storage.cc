// The interface's destructors, out of line: the vtables of ReadView and Storage get one home,
// and the interface layer one source of its own (an object library needs one).

#include "storage/storage.h"

namespace idem::storage {

ReadView::~ReadView() = default;
Storage::~Storage() = default;

Result<bool> Storage::Forget(std::string_view key, Durability durability) {
  Result<ReadResult> read = Read(key);
  if (read.ok()) {
    engine::MakeVisible(read->record, read->now);
    if (!read->record) return false;
  } else if (read.status().code() != Status::Code::kCorruption &&
             read.status().code() != Status::Code::kNewerVersion) {
    return read.status();
  }
  return Remove(key, durability);
}

}  // namespace idem::storage
