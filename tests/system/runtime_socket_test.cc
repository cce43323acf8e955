// A store whose directory cannot hold the owner's socket (a file system without socket inodes,
// mounted by the test) is served through the runtime directory (sharing/runtime_directory.h):
// processes share it and fail over; Sharing::kExclusive needs no socket at all; a runtime
// directory another user could reach or redirect is refused, at once and saying why.
//
// Every test here that uses a runtime directory points XDG_RUNTIME_DIR at a private temporary
// directory of its own (and plants anything hostile only there): the machine's (/run/idem,
// /tmp/idem-0) are shared by every process of the user, tests running in parallel included.
//
// Mounting needs root; without it, or without the tools (dosfstools for a kernel vfat, else
// exfatprogs and exfat-fuse), the tests that need a mount are skipped saying so.

#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "idem/idem.h"
#include "sharing/runtime_directory.h"
#include "support/sharing_worker.h"
#include "support/test_util.h"

namespace {

using idem::Status;
using idem_test::CapturedLog;
using idem_test::RuntimeDirectoryOverride;
using idem_test::TempDir;
using idem_test::TestOptions;
using idem_test::Worker;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr uid_t kNobody = 65534;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Runs a shell command quietly; true when it exits 0.
bool Run(const std::string& command) {
  return std::system(("(" + command + ") >/dev/null 2>&1").c_str()) == 0;
}

// What a command prints, trailing newline removed.
std::string Output(const std::string& command) {
  std::string out;
  if (FILE* pipe = ::popen(command.c_str(), "r")) {
    char buffer[256];
    while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
    ::pclose(pipe);
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// A FAT file system in an image file, mounted on `dir` for this process's user with mode 0700
// directories and 0600 files: bind() cannot make a socket in it. The kernel's vfat when it has
// one (EPERM), else exFAT through FUSE (exfat-fuse: EIO).
class SocketlessDisk {
 public:
  explicit SocketlessDisk(const TempDir& dir) : image_(dir.Sub("fat.img")), dir_(dir.Sub("mnt")) {
    if (::geteuid() != 0) {
      error_ = "needs root to mount a FAT image (run the tests as root, as CI does)";
      return;
    }
    ::mkdir(dir_.c_str(), 0700);
    const std::string owner =
        "uid=" + std::to_string(::geteuid()) + ",gid=" + std::to_string(::getegid()) + ",umask=077";
    if (::truncate(image_.c_str(), 0) != 0) {
      const int fd = ::open(image_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
      if (fd >= 0) ::close(fd);
    }
    if (::truncate(image_.c_str(), 64 << 20) != 0) {
      error_ = "cannot make the image " + image_;
      return;
    }
    if (Run("command -v mkfs.vfat") && Run("mkfs.vfat " + image_) &&
        Run("mount -t vfat -o loop," + owner + " " + image_ + " " + dir_)) {
      kind_ = "vfat";
      mounted_ = true;
      return;
    }
    if (!Run("command -v mkfs.exfat && command -v mount.exfat-fuse && command -v losetup")) {
      error_ =
          "this kernel has no vfat, and exFAT through FUSE needs mkfs.exfat (exfatprogs), "
          "mount.exfat-fuse (exfat-fuse) and losetup: scripts/install-deps.sh installs them";
      return;
    }
    if (!Run("mkfs.exfat " + image_)) {
      error_ = "mkfs.exfat failed on " + image_;
      return;
    }
    // Tests running at the same time may race for the same free loop device: try again.
    for (int attempt = 0; attempt < 5 && loop_.empty(); ++attempt) {
      loop_ = Output("losetup -f --show " + image_ + " 2>/dev/null");
      if (loop_.empty()) std::this_thread::sleep_for(100ms);
    }
    if (loop_.empty()) {
      error_ = "no loop device for " + image_ + " (a container without loop devices?)";
      return;
    }
    if (!Run("mount.exfat-fuse -o " + owner + " " + loop_ + " " + dir_)) {
      error_ = "cannot mount exFAT through FUSE on " + dir_ + " (no /dev/fuse here?)";
      return;
    }
    kind_ = "exfat-fuse";
    mounted_ = true;
  }
  ~SocketlessDisk() {
    if (mounted_ && ::umount(dir_.c_str()) != 0) ::umount2(dir_.c_str(), MNT_DETACH);
    if (!loop_.empty()) Run("losetup -d " + loop_);
  }
  SocketlessDisk(const SocketlessDisk&) = delete;
  SocketlessDisk& operator=(const SocketlessDisk&) = delete;

  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }
  const std::string& kind() const { return kind_; }
  std::string StorePath() const { return dir_ + "/store"; }

 private:
  const std::string image_;
  const std::string dir_;
  std::string loop_;
  std::string kind_;
  bool mounted_ = false;
  std::string error_;
};

#define IDEM_NEED_SOCKETLESS_DISK(disk) \
  if (!(disk).mounted()) GTEST_SKIP() << (disk).error()

// The socket file the owner of `store` serves in the runtime directory `runtime` (the value of
// XDG_RUNTIME_DIR).
std::string RuntimeSocket(const std::string& runtime, const std::string& store) {
  struct stat info {};
  if (::stat(store.c_str(), &info) != 0) return "";
  return runtime + "/idem/" + idem::sharing::RuntimeSocketName(info.st_dev, info.st_ino);
}

bool IsSocket(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0 && S_ISSOCK(info.st_mode);
}

TEST(RuntimeSocket, TheRuntimeDirectoryIsXdgThenRunUserThenRunIdemThenTmp) {
  using idem::sharing::ChooseRuntimeDirectory;
  const auto only = [](std::string owned) {
    return [owned](const std::string& path) { return path == owned; };
  };
  EXPECT_EQ(ChooseRuntimeDirectory("/x/run/", 1000, only("/x/run/")), "/x/run/idem");
  // Relative, or not a directory of the user's: the next one.
  EXPECT_EQ(ChooseRuntimeDirectory("x/run", 1000, only("x/run")), "/tmp/idem-1000");
  EXPECT_EQ(ChooseRuntimeDirectory("/x/run", 1000, only("/run/user/1000")), "/run/user/1000/idem");
  EXPECT_EQ(ChooseRuntimeDirectory(nullptr, 1000, only("/run/user/1000")), "/run/user/1000/idem");
  EXPECT_EQ(ChooseRuntimeDirectory(nullptr, 0, only("none")), "/run/idem");
  EXPECT_EQ(ChooseRuntimeDirectory(nullptr, 1000, only("none")), "/tmp/idem-1000");
  EXPECT_EQ(idem::sharing::RuntimeSocketName(0xfe00, 0xb1601b), "idem-fe00-b1601b.socket");
}

// Before: Store::Open failed ("cannot bind the store socket .../socket.new"), for every process.
TEST(RuntimeSocket, ProcessesShareAStoreWhoseDirectoryCannotHoldASocketAndFailOver) {
  TempDir dir;
  SocketlessDisk disk(dir);
  IDEM_NEED_SOCKETLESS_DISK(disk);
  TempDir runtime;
  RuntimeDirectoryOverride private_runtime(runtime.path());
  const std::string store = disk.StorePath();

  Worker owner({"open", store, "auto"});
  ASSERT_EQ(owner.ReadLine(), "open");
  const std::string socket = RuntimeSocket(runtime.path(), store);
  EXPECT_TRUE(IsSocket(socket)) << socket;
  struct stat info {};
  ASSERT_EQ(::stat(socket.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((runtime.path() + "/idem").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
  EXPECT_FALSE(fs::exists(store + "/socket"));
  // What the failed bind may have made there (exfat-fuse makes a regular file) is gone.
  EXPECT_FALSE(fs::exists(store + "/socket.new"));

  // Two clients: this process and another, both answered by the owner through that socket.
  CapturedLog log;
  idem::Options options = TestOptions();
  options.log = log.Sink();
  IDEM_ASSERT_OPEN(client, store, options);
  auto claim = client->Begin("mine");
  ASSERT_TRUE(claim.ok()) << claim.status().ToString();
  ASSERT_OK(client->Complete("mine", claim->token, "done"));
  auto counters = client->GetOwnerCounters();
  ASSERT_TRUE(counters.ok()) << counters.status().ToString();
  EXPECT_EQ(counters->pid, owner.pid()) << "not answered by the owner";
  Worker other({"hold", store, "theirs"});
  ASSERT_TRUE(other.ReadLine().starts_with("held ")) << "the second client could not claim";
  auto theirs = client->Get("theirs");
  ASSERT_TRUE(theirs.ok() && theirs->has_value()) << theirs.status().ToString();

  // The owner dies: this process takes over on its next call, and serves the same way.
  owner.Kill();
  auto after = client->Get("mine");
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  ASSERT_TRUE(after->has_value());
  EXPECT_EQ((*after)->result, "done");
  auto now = client->GetOwnerCounters();
  ASSERT_TRUE(now.ok()) << now.status().ToString();
  EXPECT_EQ(now->pid, ::getpid()) << "this process did not take over";
  EXPECT_TRUE(IsSocket(socket)) << "the new owner serves no runtime socket";
  EXPECT_TRUE(Contains(log.All(), "the store's socket cannot be in its directory (")) << log.All();
  EXPECT_TRUE(Contains(log.All(), "serving at " + socket)) << log.All();
  EXPECT_EQ(log.CountEvent("socket_elsewhere", idem::LogSeverity::kInfo), 1) << log.All();
  EXPECT_EQ(log.CountEvent("failover", idem::LogSeverity::kInfo), 1) << log.All();

  // A third process reaches the new owner.
  Worker third({"hold", store, "third"});
  ASSERT_TRUE(third.ReadLine().starts_with("held ")) << "the third process could not claim";
  auto held = client->Get("third");
  ASSERT_TRUE(held.ok() && held->has_value()) << held.status().ToString();
  EXPECT_EQ((*held)->state, idem::State::kPending);

  // Closed, the owner leaves nothing behind in the runtime directory.
  third.Kill();
  other.Kill();
  client.reset();
  EXPECT_FALSE(fs::exists(socket));
}

TEST(RuntimeSocket, AnExclusiveStoreNeedsNoSocketAnywhere) {
  TempDir dir;
  SocketlessDisk disk(dir);
  IDEM_NEED_SOCKETLESS_DISK(disk);
  TempDir runtime;
  RuntimeDirectoryOverride private_runtime(runtime.path());
  idem::Options options = TestOptions();
  options.sharing = idem::Sharing::kExclusive;
  IDEM_ASSERT_OPEN(store, disk.StorePath(), options);
  auto claim = store->Begin("k");
  ASSERT_TRUE(claim.ok()) << claim.status().ToString();
  ASSERT_OK(store->Complete("k", claim->token, "v"));
  EXPECT_FALSE(fs::exists(disk.StorePath() + "/socket"));
  EXPECT_FALSE(fs::exists(disk.StorePath() + "/socket.new"));
  EXPECT_FALSE(fs::exists(runtime.path() + "/idem"))
      << "an exclusive store made a runtime directory";
  // A second process is refused, whichever sharing it asks for.
  for (const std::string sharing : {"auto", "exclusive"}) {
    Worker second({"open", disk.StorePath(), sharing});
    const std::string line = second.ReadLine();
    EXPECT_TRUE(line.starts_with("Busy:")) << sharing << ": " << line;
  }
}

// What each hostile runtime directory is, and what the refusal must say.
struct Hostile {
  std::string name;
  std::function<void(const std::string& path, const TempDir& runtime)> plant;
  std::string says;
};

std::vector<Hostile> HostileRuntimeDirectories() {
  std::vector<Hostile> all = {
      {"a symbolic link",
       [](const std::string& path, const TempDir& runtime) {
         ASSERT_EQ(::mkdir(runtime.Sub("elsewhere").c_str(), 0700), 0);
         ASSERT_EQ(::symlink(runtime.Sub("elsewhere").c_str(), path.c_str()), 0);
       },
       "is a symbolic link"},
      {"mode 0755",
       [](const std::string& path, const TempDir&) {
         ASSERT_EQ(::mkdir(path.c_str(), 0700), 0);
         ASSERT_EQ(::chmod(path.c_str(), 0755), 0);
       },
       "has mode 0755"},
      {"a file", [](const std::string& path, const TempDir&) { std::ofstream(path) << "x"; },
       "is not a directory"},
  };
  if (::geteuid() == 0) {
    all.push_back({"another user's",
                   [](const std::string& path, const TempDir&) {
                     ASSERT_EQ(::mkdir(path.c_str(), 0700), 0);
                     ASSERT_EQ(::chown(path.c_str(), kNobody, kNobody), 0);
                   },
                   "belongs to uid 65534"});
  }
  return all;
}

// Checked on its own (any user; another user's directory needs root to make).
TEST(RuntimeSocket, AHostileRuntimeDirectoryIsRefusedSayingWhy) {
  for (const Hostile& hostile : HostileRuntimeDirectories()) {
    SCOPED_TRACE(hostile.name);
    TempDir runtime;
    RuntimeDirectoryOverride private_runtime(runtime.path());
    const std::string path = runtime.Sub("idem");
    hostile.plant(path, runtime);
    for (bool create : {false, true}) {
      auto opened = idem::sharing::OpenRuntimeDirectory(create);
      ASSERT_FALSE(opened.ok());
      EXPECT_EQ(opened.status().code(), Status::Code::kIOError) << opened.status().ToString();
      EXPECT_TRUE(
          Contains(opened.status().message(), "the runtime directory " + path + " " + hostile.says))
          << opened.status().ToString();
      EXPECT_TRUE(Contains(opened.status().message(), "XDG_RUNTIME_DIR"))
          << opened.status().ToString();
    }
    // Nothing was made through the link.
    if (fs::exists(runtime.Sub("elsewhere"))) {
      EXPECT_TRUE(fs::is_empty(runtime.Sub("elsewhere"))) << "something was made through the link";
    }
  }
  // A missing one is made 0700 (and only when asked to).
  TempDir runtime;
  RuntimeDirectoryOverride private_runtime(runtime.path());
  auto missing = idem::sharing::OpenRuntimeDirectory(false);
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound) << missing.status().ToString();
  const mode_t old_umask = ::umask(0);
  auto made = idem::sharing::OpenRuntimeDirectory(true);
  ::umask(old_umask);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  struct stat info {};
  ASSERT_EQ(::stat(runtime.Sub("idem").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0700u);
}

// The owner of a store that needs the runtime directory fails to open, at once (no retrying until
// a timeout) and saying why; once fixed as the message says, the store opens.
TEST(RuntimeSocket, AStoreThatNeedsAHostileRuntimeDirectoryFailsAtOnceSayingWhy) {
  TempDir dir;
  SocketlessDisk disk(dir);
  IDEM_NEED_SOCKETLESS_DISK(disk);
  {
    IDEM_ASSERT_OPEN(created, disk.StorePath(), [] {
      idem::Options exclusive = TestOptions();
      exclusive.sharing = idem::Sharing::kExclusive;
      return exclusive;
    }());
  }
  for (const Hostile& hostile : HostileRuntimeDirectories()) {
    SCOPED_TRACE(hostile.name);
    TempDir runtime;
    RuntimeDirectoryOverride private_runtime(runtime.path());
    const std::string path = runtime.Sub("idem");
    hostile.plant(path, runtime);
    const auto start = std::chrono::steady_clock::now();
    auto opened = idem::Store::Open(disk.StorePath(), TestOptions());
    const auto took = std::chrono::steady_clock::now() - start;
    ASSERT_FALSE(opened.ok()) << "served through a hostile runtime directory";
    EXPECT_EQ(opened.status().code(), Status::Code::kIOError) << opened.status().ToString();
    EXPECT_TRUE(
        Contains(opened.status().message(), "the store's socket cannot be in its directory"))
        << opened.status().ToString();
    EXPECT_TRUE(Contains(opened.status().message(), path + " " + hostile.says))
        << opened.status().ToString();
    EXPECT_LT(took, 5s) << "Open retried instead of failing";
    if (fs::exists(runtime.Sub("elsewhere"))) {
      EXPECT_TRUE(fs::is_empty(runtime.Sub("elsewhere"))) << "something was made through the link";
    }
    // Fixed: removed, idem makes it again.
    fs::remove_all(path);
    IDEM_ASSERT_OPEN(fixed, disk.StorePath(), TestOptions());
  }
}

// A client that cannot look in the runtime directory (refused there, or another one) while an
// owner serves the store there gives up within its failover timeout, saying why: it never waits
// for ever.
TEST(RuntimeSocket, AClientThatCannotFindTheOwnersSocketGivesUpInTime) {
  TempDir dir;
  SocketlessDisk disk(dir);
  IDEM_NEED_SOCKETLESS_DISK(disk);
  TempDir runtime;
  std::optional<RuntimeDirectoryOverride> owners(runtime.path());
  Worker owner({"open", disk.StorePath(), "auto"});
  ASSERT_EQ(owner.ReadLine(), "open");
  owners.reset();
  TempDir elsewhere;
  RuntimeDirectoryOverride mine(elsewhere.path());
  ASSERT_EQ(::mkdir(elsewhere.Sub("idem").c_str(), 0755), 0);
  for (bool read_only : {false, true}) {
    SCOPED_TRACE(read_only ? "reader" : "writer");
    idem::Options options = TestOptions();
    options.read_only = read_only;
    options.failover_timeout = 1s;
    const auto start = std::chrono::steady_clock::now();
    auto opened = idem::Store::Open(disk.StorePath(), options);
    const auto took = std::chrono::steady_clock::now() - start;
    ASSERT_FALSE(opened.ok());
    EXPECT_EQ(opened.status().code(), Status::Code::kUnavailable) << opened.status().ToString();
    EXPECT_TRUE(Contains(opened.status().message(), elsewhere.Sub("idem") + " has mode 0755"))
        << opened.status().ToString();
    EXPECT_LT(took, 5s);
  }
}

// A store directory that holds sockets needs no runtime directory: a hostile one changes nothing
// for it, and a socket an earlier owner left in the runtime directory is removed.
TEST(RuntimeSocket, AStoreWhoseDirectoryHoldsItsSocketNeverNeedsTheRuntimeDirectory) {
  TempDir dir;
  TempDir runtime;
  RuntimeDirectoryOverride private_runtime(runtime.path());
  ASSERT_EQ(::mkdir(runtime.Sub("idem").c_str(), 0700), 0);
  { IDEM_ASSERT_OPEN(created, dir.StorePath()); }
  // A stale socket, as an owner killed while serving there leaves.
  const std::string stale = RuntimeSocket(runtime.path(), dir.StorePath());
  {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, stale.c_str(), stale.size() + 1);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << stale;
    ::close(fd);
  }
  {
    Worker owner({"open", dir.StorePath(), "auto"});
    ASSERT_EQ(owner.ReadLine(), "open");
    EXPECT_TRUE(IsSocket(dir.StorePath() + "/socket"));
    EXPECT_FALSE(fs::exists(stale)) << "the owner left another owner's socket in place";
  }
  // Now hostile: a link in place of the runtime directory.
  fs::remove_all(runtime.Sub("idem"));
  ASSERT_EQ(::symlink(dir.path().c_str(), runtime.Sub("idem").c_str()), 0);
  Worker owner({"open", dir.StorePath(), "auto"});
  ASSERT_EQ(owner.ReadLine(), "open");
  IDEM_ASSERT_OPEN(client, dir.StorePath());
  auto claim = client->Begin("k");
  ASSERT_TRUE(claim.ok()) << claim.status().ToString();
  auto counters = client->GetOwnerCounters();
  ASSERT_TRUE(counters.ok()) << counters.status().ToString();
  EXPECT_EQ(counters->pid, owner.pid()) << "this process is not the owner's client";
}

}  // namespace
