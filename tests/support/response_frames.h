// ReadAnswers: the tests that talk to an owner's socket as a raw peer read the answers to
// requests they sent together with it.

#ifndef IDEM_TESTS_RESPONSE_FRAMES_H_
#define IDEM_TESTS_RESPONSE_FRAMES_H_

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/status.h"
#include "sharing/protocol.h"
#include "sharing/socket.h"

namespace idem_test {

// Reads `count` answers from `fd` (however they arrive together: a peer that sent requests
// together gets their answers in one read or several), each response frame's status and body
// (the decoding error instead for a frame that is no response). A failure when fewer arrive
// within 15 s of each other.
inline std::vector<std::pair<idem::Status, std::string>> ReadAnswers(int fd, std::size_t count) {
  std::vector<std::pair<idem::Status, std::string>> answers;
  std::string in;
  while (answers.size() < count) {
    pollfd ready{fd, POLLIN, 0};
    char chunk[4096];
    const ssize_t n = poll(&ready, 1, 15000) == 1 ? recv(fd, chunk, sizeof chunk, 0) : -1;
    if (n <= 0) {
      ADD_FAILURE() << "the owner sent " << answers.size() << " answers of " << count;
      break;
    }
    in.append(chunk, static_cast<std::size_t>(n));
    for (;;) {
      const idem::sharing::FrameCut cut =
          idem::sharing::CutFrame(in, std::numeric_limits<uint32_t>::max());
      if (cut.state != idem::sharing::FrameCut::State::kWhole) break;
      idem::Status status;
      idem::sharing::ResponseKind kind{};
      idem::Result<std::string_view> body =
          idem::sharing::DecodeResponse(cut.payload, status, kind);
      answers.emplace_back(body.ok() ? status : body.status(),
                           body.ok() ? std::string(*body) : std::string());
      in.erase(0, cut.size);
    }
  }
  return answers;
}

}  // namespace idem_test

#endif  // IDEM_TESTS_RESPONSE_FRAMES_H_
