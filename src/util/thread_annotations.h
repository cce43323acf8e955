// Clang's thread-safety attributes, as macros that are empty for other compilers (GCC has no such
// analysis). The build preset clang-thread-safety compiles src/ and tools/ with
// -Werror=thread-safety, so that a member read without the mutex its declaration names fails
// CI. https://clang.llvm.org/docs/ThreadSafetyAnalysis.html

#ifndef IDEM_UTIL_THREAD_ANNOTATIONS_H_
#define IDEM_UTIL_THREAD_ANNOTATIONS_H_

#if defined(__clang__)
#define IDEM_TSA(x) __attribute__((x))
#else
#define IDEM_TSA(x)
#endif

#define IDEM_CAPABILITY(name) IDEM_TSA(capability(name))
#define IDEM_SCOPED_CAPABILITY IDEM_TSA(scoped_lockable)
#define IDEM_GUARDED_BY(mu) IDEM_TSA(guarded_by(mu))
#define IDEM_PT_GUARDED_BY(mu) IDEM_TSA(pt_guarded_by(mu))
#define IDEM_ACQUIRED_AFTER(...) IDEM_TSA(acquired_after(__VA_ARGS__))
#define IDEM_REQUIRES(...) IDEM_TSA(requires_capability(__VA_ARGS__))
#define IDEM_REQUIRES_SHARED(...) IDEM_TSA(requires_shared_capability(__VA_ARGS__))
#define IDEM_EXCLUDES(...) IDEM_TSA(locks_excluded(__VA_ARGS__))
#define IDEM_ACQUIRE(...) IDEM_TSA(acquire_capability(__VA_ARGS__))
#define IDEM_ACQUIRE_SHARED(...) IDEM_TSA(acquire_shared_capability(__VA_ARGS__))
#define IDEM_RELEASE(...) IDEM_TSA(release_capability(__VA_ARGS__))
#define IDEM_RELEASE_SHARED(...) IDEM_TSA(release_shared_capability(__VA_ARGS__))
#define IDEM_TRY_ACQUIRE(...) IDEM_TSA(try_acquire_capability(__VA_ARGS__))
#define IDEM_ASSERT_CAPABILITY(x) IDEM_TSA(assert_capability(x))
#define IDEM_NO_THREAD_SAFETY_ANALYSIS IDEM_TSA(no_thread_safety_analysis)

#endif  // IDEM_UTIL_THREAD_ANNOTATIONS_H_
