// A store path that another user planted: a symbolic link of theirs on the way is refused (as the
// kernel's protected_symlinks does in sticky directories), and in the directory reached, idem
// removes or replaces only sockets of its own user (issue 40, item 8). Before: a root process
// followed another user's link into a root-only directory and replaced a regular file named
// `socket` there.

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "idem/idem.h"
#include "support/file_text.h"
#include "support/test_util.h"
#include "util/links.h"

namespace {

using idem_test::ReadFile;

namespace fs = std::filesystem;
using idem::Status;
using idem_test::TempDir;
using idem_test::TestOptions;

constexpr uid_t kNobody = 65534;

// A UNIX socket file at `path` (bound, then closed: the file stays).
void MakeSocketFile(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
      << std::strerror(errno);
  ::close(fd);
}

TEST(PlantedLink, AFileWhereTheSocketGoesIsNeverReplaced) {
  for (const std::string name : {"socket", "socket.new"}) {
    SCOPED_TRACE(name);
    TempDir dir;
    { IDEM_ASSERT_OPEN(created, dir.StorePath()); }
    const std::string planted = dir.StorePath() + "/" + name;
    fs::remove(planted);
    { std::ofstream(planted) << "precious\n"; }
    auto opened = idem::Store::Open(dir.StorePath(), TestOptions());
    ASSERT_FALSE(opened.ok()) << "a store served its socket in place of a regular file";
    EXPECT_EQ(opened.status().code(), Status::Code::kIOError) << opened.status().ToString();
    EXPECT_NE(opened.status().message().find("not a socket of uid"), std::string::npos)
        << opened.status().ToString();
    EXPECT_EQ(ReadFile(planted), "precious\n");
    // Removed, as the message says, the store opens.
    fs::remove(planted);
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    ASSERT_TRUE(store->Begin("k").ok());
  }
}

TEST(PlantedLink, ASocketOfAnotherUserIsNeverRemoved) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a socket of another user";
  TempDir dir;
  { IDEM_ASSERT_OPEN(created, dir.StorePath()); }
  const std::string planted = dir.StorePath() + "/socket";
  fs::remove(planted);
  MakeSocketFile(planted);
  ASSERT_EQ(::lchown(planted.c_str(), kNobody, kNobody), 0);
  struct stat before {};
  ASSERT_EQ(::lstat(planted.c_str(), &before), 0);
  auto opened = idem::Store::Open(dir.StorePath(), TestOptions());
  ASSERT_FALSE(opened.ok()) << "root replaced a socket of uid 65534";
  EXPECT_NE(opened.status().message().find("a socket of uid 65534"), std::string::npos)
      << opened.status().ToString();
  struct stat after {};
  ASSERT_EQ(::lstat(planted.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(after.st_uid, kNobody);
}

// The case: another user's link to a directory of this user's (root's) own.
TEST(PlantedLink, AStorePathThroughAnotherUsersLinkIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a link of another user";
  TempDir dir;
  const std::string victim = dir.Sub("root-only");
  ASSERT_EQ(::mkdir(victim.c_str(), 0700), 0);
  { std::ofstream(victim + "/socket") << "precious\n"; }
  const std::string planted_parent = dir.Sub("planted");
  ASSERT_EQ(::mkdir(planted_parent.c_str(), 0755), 0);
  // As the last component, and in the middle of the path.
  for (const auto& [link, path] :
       {std::pair{planted_parent + "/store", planted_parent + "/store"},
        std::pair{planted_parent + "/up", planted_parent + "/up/root-only"}}) {
    SCOPED_TRACE(path);
    const std::string target = link.ends_with("up") ? dir.path() : victim;
    ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
    ASSERT_EQ(::lchown(link.c_str(), kNobody, kNobody), 0);
    idem::Options options = TestOptions();
    options.create_if_missing = true;
    auto opened = idem::Store::Open(path, options);
    ASSERT_FALSE(opened.ok()) << "opened through a link of uid 65534";
    EXPECT_EQ(opened.status().code(), Status::Code::kIOError) << opened.status().ToString();
    EXPECT_NE(opened.status().message().find("belongs to uid 65534"), std::string::npos)
        << opened.status().ToString();
    EXPECT_NE(opened.status().message().find(link), std::string::npos)
        << opened.status().ToString();
    EXPECT_EQ(ReadFile(victim + "/socket"), "precious\n");
    EXPECT_FALSE(fs::exists(victim + "/db"));
    // The same link of root (or of this user) is followed.
    ASSERT_EQ(::lchown(link.c_str(), 0, 0), 0);
    EXPECT_FALSE(idem::util::FindForeignLink(path, ::geteuid()).has_value());
    fs::remove(link);
  }
}

TEST(PlantedLink, FindForeignLinkResolvesAsTheKernelDoes) {
  TempDir dir;
  ASSERT_TRUE(fs::create_directories(dir.Sub("a/b")));
  ASSERT_EQ(::symlink("a/b", dir.Sub("ab").c_str()), 0);
  ASSERT_EQ(::symlink("../..", dir.Sub("a/b/up").c_str()), 0);
  // Links of this user are followed, relative ones from where they are, ".." after a link from
  // the directory it led to; nothing foreign is found.
  EXPECT_FALSE(idem::util::FindForeignLink(dir.Sub("ab/up/ab/up/a"), ::geteuid()).has_value());
  EXPECT_FALSE(idem::util::FindForeignLink(dir.Sub("missing/x"), ::geteuid()).has_value());
  // Seen as another user's, the first link on the way is named.
  const auto found = idem::util::FindForeignLink(dir.Sub("ab/up/a"), ::geteuid() + 1);
  if (::geteuid() == 0) {
    // Root's links are trusted by everyone.
    EXPECT_FALSE(found.has_value());
  } else {
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->link, dir.Sub("ab"));
    EXPECT_EQ(found->target, "a/b");
  }
}

}  // namespace
