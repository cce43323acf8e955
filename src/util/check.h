// IDEM_DCHECK(condition): an invariant the code relies on but does not otherwise check, tested
// in builds without NDEBUG (Debug: the asan and tsan presets, so every test under CI's
// sanitizers) and compiled out of the others (RelWithDebInfo and Release: what packagers and
// benchmarks build), where the condition is type-checked and never evaluated. A broken invariant
// prints where and what, then aborts: the state is already wrong, and going on would write it.
// -DIDEM_DCHECK_IS_ON=1 (or 0) in CMAKE_CXX_FLAGS overrides NDEBUG for every file at once.

#ifndef IDEM_UTIL_CHECK_H_
#define IDEM_UTIL_CHECK_H_

#include <cstdio>
#include <cstdlib>

#ifndef IDEM_DCHECK_IS_ON
#ifdef NDEBUG
#define IDEM_DCHECK_IS_ON 0
#else
#define IDEM_DCHECK_IS_ON 1
#endif
#endif

namespace idem::util {

[[noreturn]] inline void DcheckFailed(const char* file, int line, const char* condition) noexcept {
  std::fprintf(stderr, "%s:%d: invariant broken: %s\n", file, line, condition);
  std::abort();
}

}  // namespace idem::util

#if IDEM_DCHECK_IS_ON
#define IDEM_DCHECK(condition) \
  ((condition) ? static_cast<void>(0) : ::idem::util::DcheckFailed(__FILE__, __LINE__, #condition))
#else
#define IDEM_DCHECK(condition) static_cast<void>(sizeof(!(condition)))
#endif

#endif  // IDEM_UTIL_CHECK_H_
