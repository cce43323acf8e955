// Making a directory's entries durable: a file created, renamed or removed in a directory is
// durable only once the directory itself is synced (POSIX does not promise that the file's own
// fsync does it; ext4 and XFS happen to order their metadata, other file systems do not).

#ifndef IDEM_UTIL_SYNC_DIRECTORY_H_
#define IDEM_UTIL_SYNC_DIRECTORY_H_

#include <filesystem>

namespace idem::util {

// Opens `directory` (an empty path: the working directory) and fsyncs it. 0, or the errno of
// the open or the fsync that failed.
int SyncDirectory(const std::filesystem::path& directory);

}  // namespace idem::util

#endif  // IDEM_UTIL_SYNC_DIRECTORY_H_
