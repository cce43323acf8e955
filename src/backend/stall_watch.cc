#include "backend/stall_watch.h"

#include "util/time.h"

namespace idem::backend {

using std::chrono::milliseconds;

StallWatch::StallWatch(std::shared_ptr<const Clock> clock, milliseconds grace)
    : clock_(std::move(clock)), grace_(grace) {
  if (grace_ <= milliseconds(0)) return;
  const auto now = Steady::now();
  last_tick_ = now;
  last_tick_wall_ = clock_->Now();
  // Every claim written before this owner began may have lost renewals while there was none.
  ownership_.scope.written_before = util::TruncateToMicros(last_tick_wall_);
  ownership_.until = now + grace_;
  thread_ = std::thread([this] { Run(); });
}

StallWatch::~StallWatch() {
  {
    util::MutexLock lock(mu_);
    stopping_ = true;
  }
  stop_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void StallWatch::Run() {
  util::MutexLock lock(mu_);
  while (!stop_.WaitFor(lock, kTick, [this]() IDEM_REQUIRES(mu_) { return stopping_; })) {
    Tick(Steady::now());
  }
}

void StallWatch::Tick(Steady::time_point now) {
  if (now - last_tick_ > kStallThreshold) {
    // Renewals stopped at the last tick and are possible again from now: claims live then and
    // not written since keep their holders for one grace.
    stall_.scope.lease_ended_after = last_tick_wall_;
    stall_.scope.written_before = util::TruncateToMicros(clock_->Now());
    stall_.until = now + grace_;
    ++stalls_;
  }
  last_tick_ = now;
  last_tick_wall_ = clock_->Now();
}

uint64_t StallWatch::stalls() {
  util::MutexLock lock(mu_);
  return stalls_;
}

std::array<engine::RenewalGrace, 2> StallWatch::Graces() {
  std::array<engine::RenewalGrace, 2> graces;
  if (grace_ <= milliseconds(0)) return graces;
  util::MutexLock lock(mu_);
  const auto now = Steady::now();
  Tick(now);
  const Window* windows[] = {&ownership_, &stall_};
  for (std::size_t i = 0; i < graces.size(); ++i) {
    graces[i] = windows[i]->scope;
    graces[i].left =
        std::max(std::chrono::ceil<milliseconds>(windows[i]->until - now), milliseconds(0));
  }
  return graces;
}

}  // namespace idem::backend
