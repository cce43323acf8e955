// The shard a thread counts into, so that counters bumped on every call do not bounce one cache
// line between cores (docs/design/speed.md, increment 12).

#ifndef IDEM_UTIL_THREAD_SHARD_H_
#define IDEM_UTIL_THREAD_SHARD_H_

#include <atomic>
#include <cstddef>

namespace idem::util {

// The calling thread's shard among `shards`: threads are spread over them in the order they
// first ask, and each keeps its own for its life.
inline std::size_t ThreadShard(std::size_t shards) {
  static std::atomic<std::size_t> threads_seen{0};
  thread_local const std::size_t thread = threads_seen.fetch_add(1, std::memory_order_relaxed);
  return thread % shards;
}

}  // namespace idem::util

#endif  // IDEM_UTIL_THREAD_SHARD_H_
