#include "util/links.h"

#include <sys/stat.h>
#include <unistd.h>

#include <deque>
#include <filesystem>
#include <vector>

namespace idem::util {
namespace {

namespace fs = std::filesystem;

// As the kernel's limit of links followed in one lookup (MAXSYMLINKS).
constexpr int kMostLinks = 40;

// The components of `path`, in order ("." and empty ones left out).
void PushComponents(const fs::path& path, std::deque<std::string>& components) {
  std::vector<std::string> parts;
  for (const fs::path& part : path.relative_path()) {
    if (!part.empty() && part != ".") parts.push_back(part.string());
  }
  components.insert(components.begin(), parts.begin(), parts.end());
}

}  // namespace

std::optional<ForeignLink> FindForeignLink(std::string_view path, uid_t user) {
  const fs::path given(path);
  std::error_code error;
  // The directory a relative path starts from, resolved already (getcwd returns no links).
  fs::path resolved = given.is_absolute() ? fs::path("/") : fs::current_path(error);
  if (error) return std::nullopt;
  std::deque<std::string> left;
  PushComponents(given, left);
  int links = 0;
  while (!left.empty()) {
    const std::string component = std::move(left.front());
    left.pop_front();
    if (component == "..") {
      resolved = resolved.parent_path();
      continue;
    }
    const fs::path next = resolved / component;
    struct stat info {};
    if (::lstat(next.c_str(), &info) != 0) return std::nullopt;
    if (!S_ISLNK(info.st_mode)) {
      resolved = next;
      continue;
    }
    std::string target(static_cast<std::size_t>(info.st_size > 0 ? info.st_size : 4096), '\0');
    const ssize_t length = ::readlink(next.c_str(), target.data(), target.size());
    if (length < 0) return std::nullopt;
    target.resize(static_cast<std::size_t>(length));
    if (info.st_uid != user && info.st_uid != 0) {
      return ForeignLink{.link = next.string(), .target = target, .owner = info.st_uid};
    }
    if (++links > kMostLinks) return std::nullopt;
    const fs::path points_to(target);
    if (points_to.is_absolute()) resolved = "/";
    PushComponents(points_to, left);
  }
  return std::nullopt;
}

}  // namespace idem::util
