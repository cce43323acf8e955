// The files idem_soak's processes share: the round's logs, and the store's owner.lock.

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "soak.h"

namespace idem::soak {

std::atomic<bool> interrupted{false};

bool Append(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ::close(fd);
  return ok;
}

std::vector<std::string> ReadLines(const std::string& path, int* partial) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream content;
  content << file.rdbuf();
  const std::string text = content.str();
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (;;) {
    const std::size_t newline = text.find('\n', start);
    if (newline == std::string::npos) break;
    lines.push_back(text.substr(start, newline - start));
    start = newline + 1;
  }
  if (partial != nullptr && start < text.size()) ++*partial;
  return lines;
}

std::vector<std::string> Split(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  std::string word;
  while (in >> word) words.push_back(word);
  return words;
}

pid_t OwnerPid(const std::string& store) {
  std::ifstream file(store + "/owner.lock");
  std::string word;
  long pid = 0;
  if (!(file >> word >> pid) || word != "pid") return 0;
  return static_cast<pid_t>(pid);
}

}  // namespace idem::soak
