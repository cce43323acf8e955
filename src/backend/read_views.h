// The read views a backend keeps open (Backend::OpenView), by id: each a moment of its storage
// (storage::ReadView) that the pages of one Store::ScanSnapshot read, whichever connection or
// thread asks for them.

#ifndef IDEM_BACKEND_READ_VIEWS_H_
#define IDEM_BACKEND_READ_VIEWS_H_

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "idem/status.h"
#include "storage/storage.h"
#include "util/mutex.h"

namespace idem::backend {

class ReadViews {
 public:
  // Views open at once. Each pins data (a RocksDB snapshot keeps what was overwritten since from
  // being compacted away; a PostgreSQL view holds a connection of the pool and its transaction):
  // a caller that leaks them must not pin without bound.
  static constexpr std::size_t kMaxOpen = 16;

  explicit ReadViews(storage::Storage& storage) : storage_(storage) {}

  // A view of the storage as it is now; its id is random and never 0 (Backend::kLatest).
  // kBusy when kMaxOpen are open.
  Result<uint64_t> Open();
  // Ends view `id` (nothing when it is gone already): once no page reads it.
  void Close(uint64_t id);

  // Calls read(storage::ReadView*) with view `id` (null for 0, the latest), one caller at a time
  // per view, and returns what it returns. kUnavailable when the view is gone.
  template <class Read>
  auto With(uint64_t id, Read&& read) -> decltype(read(nullptr)) {
    if (id == 0) return read(nullptr);
    std::shared_ptr<Entry> entry;
    {
      util::MutexLock lock(mu_);
      const auto it = open_.find(id);
      if (it != open_.end()) entry = it->second;
    }
    if (!entry) {
      return Status::Unavailable(fmt::format(
          "read view {:016x} is gone (the store's owner ended it: its connection closed or sat "
          "idle, or the owner changed): read the store again",
          id));
    }
    util::MutexLock lock(entry->mu);
    return read(entry->view.get());
  }

 private:
  struct Entry {
    util::Mutex mu;  // one reader at a time (a PostgreSQL view is one connection)
    // Set before the entry is published in open_, then read under mu.
    std::unique_ptr<storage::ReadView> view;
  };

  storage::Storage& storage_;
  util::Mutex mu_;
  std::map<uint64_t, std::shared_ptr<Entry>> open_ IDEM_GUARDED_BY(mu_);
};

}  // namespace idem::backend

#endif  // IDEM_BACKEND_READ_VIEWS_H_
