#include "sharing/pipelined_connection.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#include "sharing/protocol.h"
#include "util/deadline.h"

namespace idem::sharing {

bool PipelinedConnection::ended() const {
  util::MutexLock lock(mu_);
  return ended_;
}

PipelinedConnection::Exchanged PipelinedConnection::Exchange(std::string_view frame,
                                                             Clock::time_point deadline,
                                                             std::string& answer) {
  const auto me = std::make_shared<Waiter>();
  {
    util::MutexLock send_lock(send_mu_);
    {
      util::MutexLock lock(mu_);
      if (ended_) return Exchanged::kEnded;
      if (waiting_.size() >= kMaxWaiting) return Exchanged::kFull;
      waiting_.push_back(me);
    }
    const Status sent = SendFrame(fd_.get(), frame, deadline);
    if (!sent.ok()) {
      // Part of a frame may be on the wire: nothing after it could be read by the owner.
      util::MutexLock lock(mu_);
      End();
      return sent.code() == Status::Code::kTimedOut ? Exchanged::kTimedOut : Exchanged::kEnded;
    }
  }
  Woken woken;
  util::MutexLock lock(mu_);
  Exchanged outcome = Exchanged::kEnded;
  while (!me->answered && !ended_) {
    if (reading_) {
      if (me->turn.WaitUntil(lock, deadline) == std::cv_status::timeout && !me->answered &&
          !ended_) {
        outcome = Exchanged::kTimedOut;
        End();
      }
      continue;
    }
    reading_ = true;
    lock.Unlock();
    const Read read = ReadArrived(deadline);
    lock.Lock();
    reading_ = false;
    // What arrived before a close is handed out first: answers, or the owner's word on why.
    if (!ended_) HandOutAnswers(woken);
    if (read == Read::kClosed) {
      End();
    } else if (read == Read::kNothingInTime && !me->answered && !ended_) {
      outcome = Exchanged::kTimedOut;
      End();
    }
    if (!me->answered && !ended_ && !woken.empty()) {
      // Others' answers came first: wake them now, not after this caller's own arrives.
      lock.Unlock();
      for (const std::shared_ptr<Waiter>& waiter : woken) waiter->turn.NotifyOne();
      woken.clear();
      lock.Lock();
    }
  }
  // The reader leaves when its own answer came: the next waiter reads from now on.
  if (!reading_ && !ended_ && !waiting_.empty()) woken.push_back(waiting_.front());
  lock.Unlock();
  for (const std::shared_ptr<Waiter>& waiter : woken) waiter->turn.NotifyOne();
  if (!me->answered) return outcome;
  answer = std::move(me->answer);
  return Exchanged::kAnswered;
}

void PipelinedConnection::End() {
  if (ended_) return;
  ended_ = true;
  // Wakes a reader in poll and a sender waiting for room; the descriptor itself stays open (and
  // its number unused) until the last user lets the connection go.
  static_cast<void>(::shutdown(fd_.get(), SHUT_RDWR));
  for (const std::shared_ptr<Waiter>& waiter : waiting_) waiter->turn.NotifyOne();
  waiting_.clear();
}

PipelinedConnection::Read PipelinedConnection::ReadArrived(Clock::time_point deadline) {
  for (;;) {
    pollfd ready{fd_.get(), POLLIN, 0};
    const int polled = ::poll(&ready, 1, static_cast<int>(util::TimeLeft(deadline).count()));
    if (polled < 0 && errno == EINTR) continue;
    if (polled < 0) return Read::kClosed;
    if (polled == 0) return Read::kNothingInTime;
    bool got = false;
    for (;;) {
      char chunk[16384];
      const ssize_t n = ::recv(fd_.get(), chunk, sizeof chunk, MSG_DONTWAIT);
      if (n > 0) {
        in_.append(chunk, static_cast<std::size_t>(n));
        got = true;
        // Less than asked for: nothing more has arrived for now.
        if (static_cast<std::size_t>(n) < sizeof chunk) return Read::kSome;
      } else if (n == 0) {
        return got ? Read::kSome : Read::kClosed;  // a close after bytes shows on the next read
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (got) return Read::kSome;
        break;  // woken without bytes: wait again
      } else if (errno != EINTR) {
        return got ? Read::kSome : Read::kClosed;
      }
    }
  }
}

void PipelinedConnection::HandOutAnswers(Woken& woken) {
  std::size_t used = 0;
  while (!ended_) {
    const FrameCut cut = CutFrame(std::string_view(in_).substr(used), kMaxResponseFrame);
    if (cut.state == FrameCut::State::kOversized) {
      End();
      break;
    }
    if (cut.state == FrameCut::State::kPartial) break;
    const std::string_view payload = cut.payload;
    used += cut.size;
    Status status;
    ResponseKind kind = ResponseKind::kAnswer;
    // A refusal or a goodbye ends the connection: the owner carried out none of the requests
    // after the answers before it, and they go again elsewhere.
    if (waiting_.empty() || !DecodeResponse(payload, status, kind).ok() ||
        kind != ResponseKind::kAnswer) {
      End();
      break;
    }
    std::shared_ptr<Waiter> waiter = std::move(waiting_.front());
    waiting_.pop_front();
    waiter->answer.assign(payload);
    waiter->answered = true;
    woken.push_back(std::move(waiter));
  }
  if (ended_) {
    std::string().swap(in_);
  } else {
    in_.erase(0, used);
  }
}

}  // namespace idem::sharing
