// OwnerProcess: a tests/support/sharing_worker.cc process that opens a store first (so it owns
// it) and keeps it until killed; stopped and resumed with signals. A test that uses it defines
// IDEM_SHARING_WORKER, the worker's path (tests/CMakeLists.txt).

#ifndef IDEM_TESTS_SUPPORT_OWNER_PROCESS_H_
#define IDEM_TESTS_SUPPORT_OWNER_PROCESS_H_

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace idem_test {

class OwnerProcess {
 public:
  explicit OwnerProcess(const std::string& path) {
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) std::abort();
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      static std::string program = IDEM_SHARING_WORKER;
      std::string open = "open", store = path, mode = "auto";
      char* argv[] = {program.data(), open.data(), store.data(), mode.data(), nullptr};
      execv(program.c_str(), argv);
      _exit(127);
    }
    close(out[1]);
    pollfd p{out[0], POLLIN, 0};
    char line[16] = {};
    ready_ = poll(&p, 1, 30'000) == 1 && read(out[0], line, sizeof line - 1) > 0 &&
             std::string(line).rfind("open", 0) == 0;
    close(out[0]);
  }
  ~OwnerProcess() { Kill(); }
  OwnerProcess(const OwnerProcess&) = delete;
  OwnerProcess& operator=(const OwnerProcess&) = delete;

  bool ready() const { return ready_; }
  pid_t pid() const { return pid_; }
  // Returns once the process is stopped: the signal takes effect when the kernel next handles
  // it for each thread, and a request sent in between would still be served.
  void Stop() {
    kill(pid_, SIGSTOP);
    int status = 0;
    while (waitpid(pid_, &status, WUNTRACED) < 0 && errno == EINTR) {
    }
  }
  void Continue() { kill(pid_, SIGCONT); }
  void Kill() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

 private:
  pid_t pid_ = -1;
  bool ready_ = false;
};

}  // namespace idem_test

#endif  // IDEM_TESTS_SUPPORT_OWNER_PROCESS_H_
