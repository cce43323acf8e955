#include "backend/key_reservations.h"

#include <fmt/format.h>

#include <algorithm>

#include "util/escape.h"

namespace idem::backend {

bool KeyReservations::Reserve(const engine::ReserveCall& call) {
  util::MutexLock lock(mu_);
  const Clock::time_point now = Clock::now();
  GrantLocked(now);
  std::set<TableKey> keys(call.keys.begin(), call.keys.end());
  auto it = FindLocked(call.claim_key, call.token);
  const bool holds_all = it != queue_.end() &&
                         std::includes(it->keys.begin(), it->keys.end(), keys.begin(), keys.end());
  if (it != queue_.end() && !holds_all) {
    queue_.erase(it);
    it = queue_.end();
  }
  if (it == queue_.end()) {
    it = queue_.insert(queue_.end(), Entry{.claim_key = std::string(call.claim_key),
                                           .token = call.token,
                                           .keys = std::move(keys),
                                           .hold = call.hold});
  }
  if (!it->granted) it->lapses = now + call.hold;
  entries_.store(queue_.size());
  GrantLocked(now);
  const Clock::time_point give_up = now + call.wait;
  for (;;) {
    // Found again after each wait: another thread may have released or dropped it meanwhile.
    it = FindLocked(call.claim_key, call.token);
    if (it == queue_.end()) return false;  // lapsed, or released by another call of its claim
    if (it->granted) return true;
    if (Clock::now() >= give_up) return false;
    // Woken by a grant, or when the first reservation lapses (nobody else may call meanwhile to
    // drop it), or at the end of the wait.
    Clock::time_point wake = give_up;
    for (const Entry& entry : queue_) wake = std::min(wake, entry.lapses);
    changed_.WaitUntil(lock, wake);
    GrantLocked(Clock::now());
  }
}

void KeyReservations::Release(std::string_view claim_key, uint64_t token) {
  if (entries_.load() == 0) return;
  util::MutexLock lock(mu_);
  const auto it = FindLocked(claim_key, token);
  if (it == queue_.end()) return;
  queue_.erase(it);
  GrantLocked(Clock::now());
  changed_.NotifyAll();  // a call of this claim waiting for it learns that it is gone
}

Status KeyReservations::CheckCommit(std::string_view claim_key, uint64_t token,
                                    const WriteSet& writes) {
  if (entries_.load() == 0) return Status::OK();
  util::MutexLock lock(mu_);
  GrantLocked(Clock::now());
  for (const Entry& entry : queue_) {
    if (!entry.granted || (entry.token == token && entry.claim_key == claim_key)) continue;
    for (const WriteSet::Write& write : writes.writes()) {
      if (!entry.keys.contains(TableKey(write.table, write.key))) continue;
      return Status::Conflict(fmt::format(
          "key {} of table {} is reserved by another Execute whose earlier run conflicted (it "
          "commits next): nothing was written, and the claim is still held: read again and "
          "complete again",
          EscapeKey(write.key), EscapeControls(write.table)));
    }
  }
  return Status::OK();
}

void KeyReservations::GrantLocked(Clock::time_point now) {
  std::erase_if(queue_, [now](const Entry& entry) { return entry.lapses <= now; });
  // The keys of the entries before the one looked at, granted or waiting: a waiting entry that
  // wants one of them waits behind that entry.
  std::set<TableKey> taken;
  bool granted_any = false;
  for (Entry& entry : queue_) {
    if (!entry.granted && std::none_of(entry.keys.begin(), entry.keys.end(),
                                       [&](const TableKey& key) { return taken.contains(key); })) {
      entry.granted = true;
      entry.lapses = now + entry.hold;
      granted_any = true;
    }
    taken.insert(entry.keys.begin(), entry.keys.end());
  }
  entries_.store(queue_.size());
  if (granted_any) changed_.NotifyAll();
}

std::list<KeyReservations::Entry>::iterator KeyReservations::FindLocked(std::string_view claim_key,
                                                                        uint64_t token) {
  return std::find_if(queue_.begin(), queue_.end(), [&](const Entry& entry) {
    return entry.token == token && entry.claim_key == claim_key;
  });
}

}  // namespace idem::backend
