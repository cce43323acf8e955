#include "backend/read_views.h"

#include "util/random.h"

namespace idem::backend {

Result<uint64_t> ReadViews::Open() {
  auto entry = std::make_shared<Entry>();
  IDEM_ASSIGN_OR_RETURN(entry->view, storage_.OpenView());
  uint64_t id = 0;
  util::MutexLock lock(mu_);
  if (open_.size() >= kMaxOpen) {
    return Status::Busy(fmt::format(
        "{} read views of the store are open already (exports running): try again later",
        kMaxOpen));
  }
  // Random: a page sent after a failover to another owner, or to this process after it became
  // the owner, finds no view of that id rather than another caller's.
  while (id == 0 || open_.contains(id)) id = util::RandomSeed();
  open_.emplace(id, std::move(entry));
  return id;
}

void ReadViews::Close(uint64_t id) {
  std::shared_ptr<Entry> entry;
  util::MutexLock lock(mu_);
  const auto it = open_.find(id);
  if (it == open_.end()) return;
  entry = std::move(it->second);  // released after mu_, or by the page still reading it
  open_.erase(it);
}

}  // namespace idem::backend
