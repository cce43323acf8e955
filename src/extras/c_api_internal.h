// What the files of the C API (c_api.cc, c_api_records.cc, c_api_stats.cc) share: the handles'
// definitions, and the guard every call that takes errptr runs under, with its error reporting.

#ifndef IDEM_EXTRAS_C_API_INTERNAL_H_
#define IDEM_EXTRAS_C_API_INTERNAL_H_

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/c.h"
#include "idem/store.h"

struct idem_options_t {
  idem::Options options;
};

struct idem_store_t {
  std::unique_ptr<idem::Store> store;
};

struct idem_record_t {
  idem::Record record;
};

struct idem_writeset_t {
  idem::WriteSet writes;
};

struct idem_value_t {
  idem::TableValue value;
};

struct idem_log_line_t {
  idem::LogSeverity severity;
  std::string event;
  std::string message;
};

struct idem_health_t {
  idem::StoreHealth health;
};

struct idem_stats_t {
  idem::StoreStats stats;
  // stats.by_type's entries in order, for access by index.
  std::vector<std::pair<std::string, uint64_t>> types;
};

struct idem_check_t {
  idem::CheckReport report;
};

struct idem_claim_t {
  idem::Claim claim;
  idem_record_t record;  // claim.record, as idem_claim_record hands it out
};

struct idem_attempt_t {
  idem::Attempt* attempt;
};

namespace idem::c_api {

using std::chrono::milliseconds;

// The code of the last call on this thread that takes errptr (idem_last_error_code): per
// thread, like errno, because a store handle is shared by threads.
inline thread_local int last_error_code = IDEM_OK;

// The code of one call that takes errptr, published as this thread's last when the call returns.
// Calls nest (idem_execute runs a callback that may call idem), so each keeps its own and the
// outer one publishes last: after idem_execute, the code is idem_execute's.
class CallCode {
 public:
  CallCode() : outer_(innermost_) { innermost_ = this; }
  ~CallCode() {
    innermost_ = outer_;
    last_error_code = code_;
  }
  CallCode(const CallCode&) = delete;
  CallCode& operator=(const CallCode&) = delete;

  // Records the code of the call running on this thread.
  static void Set(int code) {
    if (innermost_ != nullptr) innermost_->code_ = code;
  }

 private:
  static inline thread_local CallCode* innermost_ = nullptr;
  CallCode* const outer_;
  int code_ = IDEM_OK;
};

// A malloc'd copy of `bytes` with a NUL after them (so text results print directly).
inline char* CopyOut(std::string_view bytes) {
  char* out = static_cast<char*>(std::malloc(bytes.size() + 1));
  if (out == nullptr) return nullptr;
  if (!bytes.empty()) std::memcpy(out, bytes.data(), bytes.size());
  out[bytes.size()] = '\0';
  return out;
}

// Stores "Code: message" in *errptr, freeing what it held, and the code as the running call's.
// Returns whether `status` is an error.
inline bool SaveError(char** errptr, const Status& status) {
  if (status.ok()) return false;
  CallCode::Set(static_cast<int>(status.code()));
  if (errptr != nullptr) {
    std::free(*errptr);
    *errptr = CopyOut(status.ToString());
  }
  return true;
}

// Runs `body`, turning an escaping exception into an error (kUnavailable) and `fallback`. Every
// call that takes errptr runs under it: its code starts as IDEM_OK and becomes this thread's
// last when it returns.
template <class Body, class T>
T Guard(char** errptr, T fallback, Body&& body) {
  CallCode call;  // not const: SaveError writes its code through innermost_
  try {
    return body();
  } catch (const std::bad_alloc&) {
    SaveError(errptr, Status::Unavailable("out of memory"));
  } catch (const std::exception& e) {
    SaveError(errptr, Status::Unavailable(fmt::format("unexpected exception: {}", e.what())));
  } catch (...) {
    SaveError(errptr, Status::Unavailable("unexpected exception"));
  }
  return fallback;
}

// Runs `body`, which returns a Status, under Guard; returns the call's code (IDEM_OK or the
// error's), published by Guard on its return.
template <class Body>
int GuardStatus(char** errptr, Body&& body) {
  Guard(errptr, 0, [&] {
    SaveError(errptr, body());
    return 0;
  });
  return last_error_code;
}

inline std::string_view Bytes(const char* data, size_t size) {
  return data == nullptr ? std::string_view() : std::string_view(data, size);
}

inline std::string_view Text(const char* text) {
  return text == nullptr ? std::string_view() : std::string_view(text);
}

inline const char* Out(const std::string& value, size_t* len) {
  if (len != nullptr) *len = value.size();
  return value.c_str();
}

inline idem::BeginOptions MakeBeginOptions(const char* type, const char* fingerprint,
                                           int64_t lease_ms, int64_t retention_ms) {
  return idem::BeginOptions{.type = Text(type),
                            .fingerprint = Text(fingerprint),
                            .lease = milliseconds(lease_ms),
                            .retention = milliseconds(retention_ms)};
}

}  // namespace idem::c_api

#endif  // IDEM_EXTRAS_C_API_INTERNAL_H_
