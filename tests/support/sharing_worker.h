// Starting tests/support/sharing_worker.cc processes from a test: a test that uses it is built with
// IDEM_SHARING_WORKER, the path of the worker's executable (tests/CMakeLists.txt).

#ifndef IDEM_TESTS_SHARING_WORKER_H_
#define IDEM_TESTS_SHARING_WORKER_H_

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace idem_test {

using namespace std::chrono_literals;

// A sharing_worker process whose standard output the test reads line by line; run as user `uid`
// when given (the test runs as root then).
class Worker {
 public:
  explicit Worker(const std::vector<std::string>& args, std::optional<uid_t> uid = {}) {
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) std::abort();
    pid_ = fork();
    if (pid_ == 0) {
      if (uid && (setgroups(0, nullptr) != 0 || setgid(*uid) != 0 || setuid(*uid) != 0)) _exit(126);
      dup2(out[1], STDOUT_FILENO);
      std::vector<char*> argv;
      static std::string program = IDEM_SHARING_WORKER;
      argv.push_back(program.data());
      std::vector<std::string> copy = args;
      for (auto& arg : copy) argv.push_back(arg.data());
      argv.push_back(nullptr);
      execv(program.c_str(), argv.data());
      _exit(127);
    }
    close(out[1]);
    out_ = out[0];
  }
  ~Worker() {
    Kill();
    close(out_);
  }

  pid_t pid() const { return pid_; }

  // The next line the worker printed, or "" after `timeout` or at its exit.
  std::string ReadLine(std::chrono::milliseconds timeout = 30s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto newline = buffer_.find('\n');
      if (newline != std::string::npos) {
        std::string line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[256];
      const ssize_t n = read(out_, chunk, sizeof(chunk));
      if (n <= 0) return "";
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }

  void Kill() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

  // Waits for a normal exit; returns the exit code (or -1).
  int Wait() {
    int status = 0;
    if (pid_ <= 0 || waitpid(pid_, &status, 0) != pid_) return -1;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string buffer_;
};

}  // namespace idem_test

#endif  // IDEM_TESTS_SHARING_WORKER_H_
