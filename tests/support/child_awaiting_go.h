// A child process for tests that share a store between processes (tables_test.cc,
// serializable_test.cc).

#ifndef IDEM_TESTS_CHILD_AWAITING_GO_H_
#define IDEM_TESTS_CHILD_AWAITING_GO_H_

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <functional>

namespace idem_test {

// A child process forked while this one has no threads yet, that waits for a go-ahead before it
// runs. A child forked beside an open store inherits its threads' locks as they were at the fork
// (the sanitizers' allocators have no fork handlers: one held then blocks the child's first
// allocation forever), so tests fork first, open the store, then send the child what it needs.
class ChildAwaitingGo {
 public:
  // `body` gets the value sent by Go, and its return is the child's exit code.
  explicit ChildAwaitingGo(const std::function<int(uint64_t)>& body) {
    int go[2];
    if (pipe(go) != 0) std::abort();
    pid_ = fork();
    if (pid_ == 0) {
      close(go[1]);
      uint64_t value = 0;
      if (read(go[0], &value, sizeof value) != sizeof value) _exit(100);
      _exit(body(value));
    }
    close(go[0]);
    go_ = go[1];
  }
  ~ChildAwaitingGo() {
    if (go_ >= 0) close(go_);  // the child exits without running
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }

  void Go(uint64_t value = 0) {
    ASSERT_EQ(write(go_, &value, sizeof value), static_cast<ssize_t>(sizeof value));
    close(go_);
    go_ = -1;
  }

  pid_t pid() const { return pid_; }

  // The child's exit code, or -1 when it did not exit (a signal).
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  int go_ = -1;
};

}  // namespace idem_test

#endif  // IDEM_TESTS_CHILD_AWAITING_GO_H_
