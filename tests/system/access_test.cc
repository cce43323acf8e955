// Who can use a store, and what Store::Open may touch: other local users can neither read a
// store nor connect to its owner nor stand in for it (no abstract socket, the client checks the
// owner's uid, modes 0700/0600 whatever the umask, a store of another user or one others can
// write is refused, no symbolic link followed inside); a directory that is not an idem store is
// refused and left exactly as it was; control characters in paths never reach a message raw.
//
// The tests that need a second user run a child process as uid 65534 (nobody), and those that
// need a mount namespace unshare one; both need root and are skipped with a message otherwise.

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <rocksdb/db.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "idem/idem.h"
#include "sharing/runtime_directory.h"
#include "support/file_text.h"
#include "support/test_util.h"
#include "util/escape.h"

namespace {

using idem_test::ReadFile;

namespace fs = std::filesystem;
using idem::Status;
using idem_test::TempDir;
using idem_test::TestOptions;
using namespace std::chrono_literals;

constexpr uid_t kNobody = 65534;

bool HasControlCharacter(std::string_view text) {
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) return true;
  }
  return false;
}

// A plain RocksDB database (not idem's) at `path`, holding one key.
void MakePlainRocksDb(const std::string& path) {
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* db = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(options, path, &db).ok()) << path;
  ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "k", "someone else's value").ok());
  delete db;
}

// Runs `body` in a child process as uid and gid 65534; returns its exit code (-1: killed).
int RunAsNobody(const std::function<int()>& body) {
  const pid_t child = ::fork();
  if (child == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) {
      ::_exit(100);
    }
    ::_exit(body());
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A store path longer than a socket address allows (108 bytes), under `dir`.
std::string LongStorePath(const TempDir& dir) {
  std::string path = dir.path();
  while (path.size() < 150) path += "/a-rather-long-directory-name";
  return path + "/store";
}

// ---- Item 5: other local users ---------------------------------------------------------------

// Before: a long path made the owner listen on the abstract name @idem-DEVICE-INODE, which any
// local user could connect to (and bind, once the owner was gone).
TEST(Access, ALongStorePathServesASocketFileNeverAnAbstractName) {
  TempDir dir;
  const std::string path = LongStorePath(dir);
  IDEM_ASSERT_OPEN(owner, path);
  struct stat info {};
  ASSERT_EQ(::stat((path + "/socket").c_str(), &info), 0) << "no socket file in the store";
  EXPECT_TRUE(S_ISSOCK(info.st_mode));
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  // The abstract name the owner used to take for this directory is bound by nobody.
  // /proc/net/unix lists every bound UNIX socket, abstract names with a leading '@'.
  struct stat store {};
  ASSERT_EQ(::stat(path.c_str(), &store), 0);
  const std::string name =
      "idem-" + std::to_string(store.st_dev) + "-" + std::to_string(store.st_ino);
  std::ifstream sockets("/proc/net/unix");
  for (std::string line; std::getline(sockets, line);) {
    EXPECT_FALSE(line.ends_with(" @" + name)) << line;
  }
  const std::string abstract_name = std::string(1, '\0') + name;
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to try the socket as another user";
  if (idem_test::UnderTsan()) GTEST_SKIP() << "fork of a multi-threaded process under TSan";
  // Nor can another user connect through it (before: connected, without any permission).
  const int code = RunAsNobody([&] {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, abstract_name.data(), abstract_name.size());
    const socklen_t length =
        static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + abstract_name.size());
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), length) == 0) return 1;
    return 0;
  });
  EXPECT_EQ(code, 0) << "another user connected to the store's owner";
}

// Before: a client sent its requests to whatever process served the socket. Here an impostor
// holds the owner lock and serves the socket as another user: the client must refuse it before
// sending a single byte.
TEST(Access, AClientSendsNothingToAnOwnerOfAnotherUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run the impostor as another user";
  if (idem_test::UnderTsan()) GTEST_SKIP() << "fork of a multi-threaded process under TSan";
  TempDir dir;
  { IDEM_ASSERT_OPEN(created, dir.StorePath()); }
  const std::string lock_path = dir.StorePath() + "/owner.lock";
  const std::string socket_path = dir.StorePath() + "/socket";
  int ready[2], done[2], report[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(done), 0);
  ASSERT_EQ(::pipe(report), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(ready[0]);
    ::close(done[1]);
    ::close(report[0]);
    const int lock = ::open(lock_path.c_str(), O_RDWR);
    if (lock < 0 || ::flock(lock, LOCK_EX) != 0) ::_exit(10);
    ::unlink(socket_path.c_str());
    const int listener = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
    if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) ::_exit(11);
    ::chmod(socket_path.c_str(), 0666);
    // The kernel records the listener's credentials at listen(): those of uid 65534.
    if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) {
      ::_exit(12);
    }
    if (::listen(listener, 256) != 0) ::_exit(13);
    if (::write(ready[1], "r", 1) != 1) ::_exit(14);
    char received = '0';
    std::vector<pollfd> fds = {{done[0], POLLIN, 0}, {listener, POLLIN, 0}};
    for (int rounds = 0; rounds < 3000; ++rounds) {
      if (::poll(fds.data(), fds.size(), 10) < 0) continue;
      if (fds[0].revents != 0) break;  // the test is over
      if ((fds[1].revents & POLLIN) != 0) {
        const int connection = ::accept(listener, nullptr, nullptr);
        if (connection >= 0) fds.push_back({connection, POLLIN, 0});
      }
      for (std::size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].fd < 0 || fds[i].revents == 0) continue;
        char byte;
        if (::recv(fds[i].fd, &byte, 1, MSG_DONTWAIT) > 0) received = '1';
        // Never answers: the client sees the connection closed.
        ::close(fds[i].fd);
        fds[i].fd = -1;
      }
    }
    if (::write(report[1], &received, 1) != 1) ::_exit(15);
    ::_exit(0);
  }
  ::close(ready[1]);
  ::close(done[0]);
  ::close(report[1]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1) << "the impostor did not start";

  idem::Options options = TestOptions();
  options.failover_timeout = 300ms;
  auto opened = idem::Store::Open(dir.StorePath(), options);
  if (opened.ok()) static_cast<void>((*opened)->Begin("k"));  // what it would send
  ::close(done[1]);
  char received = '?';
  EXPECT_EQ(::read(report[0], &received, 1), 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(received, '0') << "the client sent a request to another user's process";
  ASSERT_FALSE(opened.ok()) << "the client took another user's process for the owner";
  EXPECT_NE(opened.status().message().find("uid 65534"), std::string::npos)
      << opened.status().ToString();
  ::close(ready[0]);
  ::close(report[0]);
}

// Before: under umask 000 the database directory and every RocksDB file were readable by all
// (0755/0644), and the parents idem made were writable by all.
TEST(Access, UnderAPermissiveUmaskEverythingIsTheOwnersOnly) {
  TempDir dir;
  const std::string parent = dir.Sub("made-by-idem");
  const std::string path = parent + "/store";
  const mode_t saved = ::umask(0);
  {
    IDEM_ASSERT_OPEN(store, path);
    for (int i = 0; i < 50; ++i) {
      const std::string key = "k" + std::to_string(i);
      ASSERT_OK_AND_ASSIGN(auto claim, store->Begin(key));
      ASSERT_OK(store->Complete(key, claim.token, "result"));
    }
    // Table files too: a purge compacts what it removed, flushing the memtable first.
    ASSERT_OK(store->Purge({}).status());
  }
  { IDEM_ASSERT_OPEN(again, path); }  // a second open rotates the info log and the MANIFEST
  ::umask(saved);

  struct stat info {};
  ASSERT_EQ(::stat(parent.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 022, 0u)
      << "a parent idem made is writable by others: " << std::oct << (info.st_mode & 0777);
  int files = 0;
  for (const auto& [name, unused] : idem_test::TreeSnapshot(path)) {
    const std::string full = name == "." ? path : path + "/" + name;
    ASSERT_EQ(::lstat(full.c_str(), &info), 0) << full;
    const unsigned expected = S_ISDIR(info.st_mode) ? 0700u : 0600u;
    EXPECT_EQ(info.st_mode & 07777, expected) << name;
    if (S_ISREG(info.st_mode)) ++files;
  }
  EXPECT_GE(files, 8);  // LOG, LOCK, CURRENT, MANIFEST, OPTIONS, a log, a table, owner.lock
}

// Before: a store directory of another user was used as is (its owner could then read the
// log's records and replace the socket).
TEST(Access, AStoreDirectoryOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a directory of another user";
  TempDir dir;
  ASSERT_EQ(::mkdir(dir.StorePath().c_str(), 0700), 0);
  ASSERT_EQ(::chown(dir.StorePath().c_str(), kNobody, kNobody), 0);
  const auto before = idem_test::TreeSnapshot(dir.StorePath());
  auto opened = idem::Store::Open(dir.StorePath(), TestOptions());
  ASSERT_FALSE(opened.ok()) << "root opened a store of uid 65534";
  EXPECT_EQ(opened.status().code(), Status::Code::kIOError) << opened.status().ToString();
  EXPECT_NE(opened.status().message().find("belongs to uid 65534"), std::string::npos)
      << opened.status().ToString();
  EXPECT_NE(opened.status().message().find("sudo -u '#65534'"), std::string::npos)
      << opened.status().ToString();
  EXPECT_EQ(idem_test::TreeSnapshot(dir.StorePath()), before);
}

// Before: a store directory others could write (mode 0777) was accepted.
TEST(Access, AStoreDirectoryOthersCanWriteIsRefusedUntilFixed) {
  TempDir dir;
  ASSERT_EQ(::mkdir(dir.StorePath().c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir.StorePath().c_str(), 0777), 0);
  const auto before = idem_test::TreeSnapshot(dir.StorePath());
  auto opened = idem::Store::Open(dir.StorePath(), TestOptions());
  ASSERT_FALSE(opened.ok()) << "a store directory of mode 0777 was used";
  EXPECT_EQ(opened.status().code(), Status::Code::kIOError);
  EXPECT_NE(opened.status().message().find("mode 0777"), std::string::npos)
      << opened.status().ToString();
  EXPECT_NE(opened.status().message().find("chmod go-w"), std::string::npos)
      << opened.status().ToString();
  EXPECT_EQ(idem_test::TreeSnapshot(dir.StorePath()), before);

  // Fixed as the message says, it opens; then the same for its database directory.
  ASSERT_EQ(::chmod(dir.StorePath().c_str(), 0755), 0);
  { IDEM_ASSERT_OPEN(store, dir.StorePath()); }
  ASSERT_EQ(::chmod((dir.StorePath() + "/db").c_str(), 0757), 0);
  opened = idem::Store::Open(dir.StorePath(), TestOptions());
  ASSERT_FALSE(opened.ok()) << "a database directory of mode 0757 was used";
  EXPECT_NE(opened.status().message().find("mode 0757"), std::string::npos)
      << opened.status().ToString();
}

// Before: owner.lock was opened through a symbolic link and truncated, so a planted link made
// the process overwrite any file it could write; a planted db link opened another database.
TEST(Access, APlantedSymbolicLinkInsideTheStoreIsNeverFollowed) {
  for (const std::string name : {"owner.lock", "socket", "db"}) {
    SCOPED_TRACE(name);
    TempDir dir;
    const std::string victim_file = dir.Sub("victim");
    { std::ofstream(victim_file) << "precious\n"; }
    const std::string victim_store = dir.Sub("victim-store");
    { IDEM_ASSERT_OPEN(other, victim_store); }
    { IDEM_ASSERT_OPEN(created, dir.StorePath()); }
    const std::string planted = dir.StorePath() + "/" + name;
    fs::remove_all(planted);
    const std::string target = name == "db" ? victim_store + "/db" : victim_file;
    ASSERT_EQ(::symlink(target.c_str(), planted.c_str()), 0);
    const auto victim_before = idem_test::TreeSnapshot(dir.path() + "/victim-store");

    for (bool read_only : {false, true}) {
      idem::Options options = TestOptions();
      options.read_only = read_only;
      auto opened = idem::Store::Open(dir.StorePath(), options);
      ASSERT_FALSE(opened.ok()) << "opened through a planted link, read_only=" << read_only;
      EXPECT_EQ(opened.status().code(), Status::Code::kIOError) << opened.status().ToString();
      EXPECT_NE(opened.status().message().find("symbolic link"), std::string::npos)
          << opened.status().ToString();
    }
    EXPECT_EQ(ReadFile(victim_file), "precious\n");
    EXPECT_EQ(idem_test::TreeSnapshot(dir.path() + "/victim-store"), victim_before);
  }
}

// The lock file is created 0600 and checked: not a link, this user's, one name.
TEST(Access, TheLockFileIsARegularFileOfThisUserOnly) {
  TempDir dir;
  { IDEM_ASSERT_OPEN(created, dir.StorePath()); }
  const std::string lock = dir.StorePath() + "/owner.lock";
  struct stat info {};
  ASSERT_EQ(::stat(lock.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0600u);
  // A second name for it (a hard link) would let the truncating write reach through.
  ASSERT_EQ(::link(lock.c_str(), dir.Sub("second-name").c_str()), 0);
  auto opened = idem::Store::Open(dir.StorePath(), TestOptions());
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("one name"), std::string::npos)
      << opened.status().ToString();
}

// A long store path reaches its socket through /proc/self/fd. Without /proc it cannot, and the
// owner serves the socket in the runtime directory instead (before: Open failed, saying why),
// where a client finds it; an exclusive store (no socket) and a short path open as ever.
TEST(Access, WithoutProcALongStorePathIsServedInTheRuntimeDirectory) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to unmount /proc in a mount namespace";
  if (idem_test::UnderTsan()) GTEST_SKIP() << "fork of a multi-threaded process under TSan";
  TempDir dir;
  TempDir runtime;
  idem_test::RuntimeDirectoryOverride private_runtime(runtime.path());
  const std::string long_path = LongStorePath(dir);
  { IDEM_ASSERT_OPEN(created, long_path); }
  struct stat store {};
  ASSERT_EQ(::stat(long_path.c_str(), &store), 0);
  const std::string runtime_socket =
      runtime.path() + "/idem/" + idem::sharing::RuntimeSocketName(store.st_dev, store.st_ino);
  const pid_t child = ::fork();
  if (child == 0) {
    if (::unshare(CLONE_NEWNS) != 0) ::_exit(20);  // no namespaces here: reported as a skip
    if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(21);
    if (::umount2("/proc", MNT_DETACH) != 0) ::_exit(22);
    std::vector<std::string> log;
    idem::Options options = TestOptions();
    options.log = [&](std::string_view line) { log.emplace_back(line); };
    auto shared = idem::Store::Open(long_path, options);
    if (!shared.ok()) ::_exit(1);
    struct stat info {};
    if (::lstat(runtime_socket.c_str(), &info) != 0 || !S_ISSOCK(info.st_mode)) ::_exit(2);
    if (log.empty() || log[0].find("/proc") == std::string::npos) ::_exit(3);
    if (!(*shared)->Begin("k").ok()) ::_exit(4);
    shared.value().reset();
    if (::lstat(runtime_socket.c_str(), &info) == 0) ::_exit(5);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  if (WEXITSTATUS(status) >= 20)
    GTEST_SKIP() << "cannot unmount /proc here: step " << WEXITSTATUS(status);
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "1: a long path did not open for sharing without /proc; 2: no socket in the runtime "
         "directory; 3: the log did not say why (/proc); 4: the store did not work; 5: closed, it "
         "left its socket in the runtime directory";
  // The store opens as ever.
  idem::Options exclusive = TestOptions();
  exclusive.sharing = idem::Sharing::kExclusive;
  { IDEM_ASSERT_OPEN(alone, long_path, exclusive); }
  { IDEM_ASSERT_OPEN(short_path, dir.StorePath()); }
}

// ---- Item 7: what is not an idem store is left alone -----------------------------------------

// Before: with create_if_missing (the default) a plain RocksDB database in PATH/db got idem's
// column families and files, and a directory of someone's files got a db/ and owner.lock.
TEST(Access, ADirectoryThatIsNotAnIdemStoreIsRefusedAndLeftUnchanged) {
  TempDir dir;
  const std::string rocksdb_in_db = dir.Sub("rocksdb-in-db");
  ASSERT_EQ(::mkdir(rocksdb_in_db.c_str(), 0700), 0);
  MakePlainRocksDb(rocksdb_in_db + "/db");
  const std::string rocksdb_itself = dir.Sub("rocksdb-itself");
  MakePlainRocksDb(rocksdb_itself);
  const std::string files = dir.Sub("files");
  ASSERT_EQ(::mkdir(files.c_str(), 0700), 0);
  { std::ofstream(files + "/notes.txt") << "mine\n"; }
  const std::string other_db = dir.Sub("other-db");
  ASSERT_EQ(::mkdir(other_db.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((other_db + "/db").c_str(), 0700), 0);
  { std::ofstream(other_db + "/db/data.sqlite") << "not rocksdb\n"; }

  for (const std::string& path : {rocksdb_in_db, rocksdb_itself, files, other_db}) {
    const auto before = idem_test::TreeSnapshot(path);
    for (int mode = 0; mode < 3; ++mode) {
      SCOPED_TRACE(path + (mode == 0 ? " create" : mode == 1 ? " no create" : " read-only"));
      idem::Options options = TestOptions();
      options.create_if_missing = mode == 0;
      options.read_only = mode == 2;
      auto opened = idem::Store::Open(path, options);
      ASSERT_FALSE(opened.ok()) << "opened as an idem store";
      EXPECT_EQ(opened.status().code(), Status::Code::kInvalidArgument)
          << opened.status().ToString();
      EXPECT_NE(opened.status().message().find("not an idem store"), std::string::npos)
          << opened.status().ToString();
      EXPECT_EQ(idem_test::TreeSnapshot(path), before) << "changed by Store::Open";
    }
  }
  // The plain database still holds its key and nothing of idem's.
  std::vector<std::string> families;
  ASSERT_TRUE(
      rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), rocksdb_in_db + "/db", &families).ok());
  EXPECT_EQ(families, std::vector<std::string>{"default"});
}

// A store is created in a new directory, an empty one, one holding only lost+found, and one
// holding what an interrupted creation leaves (the lock file, a half-built db.new, an empty
// db/); without create_if_missing, those are "no store" (kNotFound).
TEST(Access, ANewStoreIsCreatedOnlyWhereNothingElseLives) {
  TempDir dir;
  const std::string empty = dir.Sub("empty");
  ASSERT_EQ(::mkdir(empty.c_str(), 0700), 0);
  const std::string mount_root = dir.Sub("mount-root");
  ASSERT_EQ(::mkdir(mount_root.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((mount_root + "/lost+found").c_str(), 0700), 0);
  const std::string interrupted = dir.Sub("interrupted");
  ASSERT_EQ(::mkdir(interrupted.c_str(), 0700), 0);
  { std::ofstream(interrupted + "/owner.lock") << "pid 1\n"; }
  ASSERT_EQ(::mkdir((interrupted + "/db.new").c_str(), 0700), 0);
  { std::ofstream(interrupted + "/db.new/CURRENT") << "MANIFEST-000001\n"; }
  ASSERT_EQ(::mkdir((interrupted + "/db").c_str(), 0700), 0);

  for (const std::string& path : {empty, mount_root, interrupted}) {
    SCOPED_TRACE(path);
    idem::Options no_create = TestOptions();
    no_create.create_if_missing = false;
    auto missing = idem::Store::Open(path, no_create);
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.status().code(), Status::Code::kNotFound) << missing.status().ToString();
    {
      IDEM_ASSERT_OPEN(store, path);
      ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("k"));
      ASSERT_OK(store->Complete("k", claim.token, "r"));
    }
    EXPECT_FALSE(fs::exists(path + "/db.new"));
    IDEM_ASSERT_OPEN(reopened, path, no_create);
    ASSERT_OK_AND_ASSIGN(auto got, reopened->Get("k"));
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->result, "r");
  }
}

// ---- Item 8: control characters in paths ------------------------------------------------------

TEST(Access, EscapeControlsEscapesEachControlByteAndNothingElse) {
  EXPECT_EQ(idem::EscapeControls("/srv/st\xc3\xa9/a\\b"), "/srv/st\xc3\xa9/a\\b");
  EXPECT_EQ(idem::EscapeControls(std::string("a\nb\x1b[2J\x7f\0", 9)), "a\\x0ab\\x1b[2J\\x7f\\x00");
  const std::string once = idem::EscapeControls("x\ty");
  EXPECT_EQ(idem::EscapeControls(once), once);
}

// Before: a path holding a newline or an escape sequence went into messages as is (a forged
// line in a log, or a terminal control sequence for whoever reads it).
TEST(Access, ControlCharactersInAStorePathAreEscapedInMessages) {
  TempDir dir;
  const std::string path = dir.Sub("bad\nidem: forged line\x1b[2J");
  idem::Options no_create = TestOptions();
  no_create.create_if_missing = false;
  auto missing = idem::Store::Open(path, no_create);
  ASSERT_FALSE(missing.ok());
  EXPECT_FALSE(HasControlCharacter(missing.status().message())) << missing.status().message();
  EXPECT_NE(missing.status().message().find("bad\\x0aidem: forged line\\x1b[2J"), std::string::npos)
      << missing.status().message();

  // RocksDB's own messages quote the path too: a store whose CURRENT names a missing MANIFEST.
  { IDEM_ASSERT_OPEN(created, path); }
  { std::ofstream(path + "/db/CURRENT", std::ios::trunc) << "MANIFEST-999999\n"; }
  auto damaged = idem::Store::Open(path, TestOptions());
  ASSERT_FALSE(damaged.ok());
  EXPECT_FALSE(HasControlCharacter(damaged.status().message())) << damaged.status().message();
}

// Before: the failover log line quoted the store path as is.
TEST(Access, LogLinesEscapeControlCharactersInPaths) {
  if (idem_test::UnderTsan()) GTEST_SKIP() << "fork of a multi-threaded process under TSan";
  TempDir dir;
  const std::string path = dir.Sub("store\nidem: forged");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t owner = ::fork();
  if (owner == 0) {
    auto store = idem::Store::Open(path, TestOptions());
    if (!store.ok()) ::_exit(1);
    if (::write(ready[1], "r", 1) != 1) ::_exit(2);
    for (;;) ::pause();
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  std::mutex mu;
  std::vector<std::string> lines;
  idem::Options options = TestOptions();
  options.log = [&](std::string_view line) {
    std::lock_guard lock(mu);
    lines.emplace_back(line);
  };
  IDEM_ASSERT_OPEN(client, path, options);  // a client of the child
  ::kill(owner, SIGKILL);
  ::waitpid(owner, nullptr, 0);
  ASSERT_OK_AND_ASSIGN(auto got, client->Get("k"));  // fails over, and logs it
  EXPECT_FALSE(got.has_value());
  std::lock_guard lock(mu);
  ASSERT_FALSE(lines.empty()) << "no failover log line";
  for (const std::string& line : lines) {
    EXPECT_FALSE(HasControlCharacter(line)) << line;
  }
  ::close(ready[0]);
  ::close(ready[1]);
}

}  // namespace
