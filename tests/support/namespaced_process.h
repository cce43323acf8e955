// A process in new namespaces, as containers run them: a PID namespace (with a /proc of its own,
// or the host's, or none), a time namespace. Tests use it to make a process that judges holders
// from another namespace (dead_holder_test.cc), or one that looks like another host to every
// other process (pg_hosts_test.cc: a PID namespace with its own /proc gives it another pid
// scope). Making namespaces needs root (CAP_SYS_ADMIN); without it byte() is kNotPermitted.

#ifndef IDEM_TESTS_NAMESPACED_PROCESS_H_
#define IDEM_TESTS_NAMESPACED_PROCESS_H_

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <functional>

namespace idem_test {

// The namespaces a NamespacedProcess runs in.
struct Namespaces {
  bool pid = false;         // a new PID namespace
  bool mount_proc = false;  // with a /proc of its own (needs pid): else the host's /proc
  bool hide_proc = false;   // an empty tmpfs over /proc
  bool time = false;        // a new time namespace, boot time one day ahead
};

// Runs `body` in a process in new namespaces: a child unshares them and forks the process (the
// first process of a new PID or time namespace is the child's child). The process reports body's
// byte, then stays alive (a live holder) until killed or destroyed. The constructor returns once
// the process runs; byte() waits for body's byte.
class NamespacedProcess {
 public:
  // The byte when the namespaces could not be made (a test skips), and when the process ended
  // without reporting one (killed).
  static constexpr char kNotPermitted = 'S';
  static constexpr char kNoByte = 'e';

  NamespacedProcess(const Namespaces& namespaces, const std::function<char()>& body) {
    // Two pipes: the middle child tells the pid on one, the process its byte on the other, so
    // that neither can come before the other on the same pipe.
    int channel[2];
    int bytes[2];
    if (pipe(channel) != 0) return;
    if (pipe(bytes) != 0) {
      close(channel[0]);
      close(channel[1]);
      return;
    }
    middle_ = fork();
    if (middle_ == 0) {
      close(channel[0]);
      close(bytes[0]);
      const int flags = (namespaces.pid ? CLONE_NEWPID : 0) |
                        (namespaces.mount_proc || namespaces.hide_proc ? CLONE_NEWNS : 0) |
                        (namespaces.time ? CLONE_NEWTIME : 0);
      if (unshare(flags) != 0) ReportNoProcess(channel[1]);
      if ((flags & CLONE_NEWNS) != 0 &&
          mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
        ReportNoProcess(channel[1]);
      }
      if (namespaces.time) {
        const int offsets = open("/proc/self/timens_offsets", O_WRONLY);
        const char text[] = "boottime 86400 0";
        if (offsets < 0 || write(offsets, text, sizeof text - 1) < 0) {
          ReportNoProcess(channel[1]);
        }
        close(offsets);
      }
      const pid_t inner = fork();
      if (inner == 0) {
        bool ready = true;
        if (namespaces.mount_proc) {
          ready = mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) == 0;
        } else if (namespaces.hide_proc) {
          ready = mount("none", "/proc", "tmpfs", 0, "size=4k") == 0;
        }
        close(channel[1]);
        const char byte = ready ? body() : kNotPermitted;
        if (write(bytes[1], &byte, 1) != 1) _exit(2);
        pause();
        _exit(0);
      }
      // Tells the test the inner process's pid as the test's namespace numbers it.
      const int32_t number = inner;
      if (write(channel[1], &number, sizeof number) != sizeof number) _exit(2);
      waitpid(inner, nullptr, 0);
      _exit(0);
    }
    close(channel[1]);
    close(bytes[1]);
    channel_ = bytes[0];
    int32_t number = 0;
    if (read(channel[0], &number, sizeof number) == sizeof number && number > 0) {
      inner_ = number;
    } else {
      byte_ = kNotPermitted;
    }
    close(channel[0]);
  }
  ~NamespacedProcess() {
    Kill();
    if (middle_ > 0) {
      kill(middle_, SIGKILL);
      waitpid(middle_, nullptr, 0);
    }
    if (channel_ >= 0) close(channel_);
  }
  NamespacedProcess(const NamespacedProcess&) = delete;
  NamespacedProcess& operator=(const NamespacedProcess&) = delete;

  // Body's byte, once it returned; kNoByte when the process ended first.
  char byte() {
    if (byte_ == 0 && (channel_ < 0 || read(channel_, &byte_, 1) != 1)) byte_ = kNoByte;
    return byte_;
  }
  // The process, as this process's PID namespace numbers it (0 if it never ran).
  pid_t pid() const { return inner_ > 0 ? inner_ : 0; }
  // SIGKILL to the process (not waited for: its parent in the middle reaps it).
  void Kill() {
    if (inner_ > 0 && !killed_) kill(inner_, SIGKILL);
    killed_ = true;
  }

 private:
  // In the middle child, when the namespaces cannot be made: report no process and leave (the
  // test then sees kNotPermitted).
  [[noreturn]] static void ReportNoProcess(int fd) {
    const int32_t none = 0;
    // If even this fails, the parent reads end-of-file: no process, the same answer.
    [[maybe_unused]] const ssize_t written = write(fd, &none, sizeof none);
    _exit(0);
  }

  pid_t middle_ = -1;
  pid_t inner_ = -1;
  bool killed_ = false;  // once killed, its pid may be another process's
  int channel_ = -1;
  char byte_ = 0;  // 0: not read yet
};

}  // namespace idem_test

#endif  // IDEM_TESTS_NAMESPACED_PROCESS_H_
