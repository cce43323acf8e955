#include "util/sync_directory.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace idem::util {

int SyncDirectory(const std::filesystem::path& directory) {
  const char* name = directory.empty() ? "." : directory.c_str();
  const int fd = ::open(name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  const int error = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return error;
}

}  // namespace idem::util
