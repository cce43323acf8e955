// Random bytes from the kernel (getrandom(2)): the one source of randomness in idem.

#ifndef IDEM_UTIL_RANDOM_H_
#define IDEM_UTIL_RANDOM_H_

#include <cstddef>
#include <cstdint>

#include "idem/status.h"

namespace idem::util {

// Fills out[0, size) from the kernel's CSPRNG. kUnavailable naming the reason when the kernel
// gives none (no getrandom: a kernel older than 3.17, or a seccomp filter refusing it). Blocks
// only early in boot, until the kernel's pool is first seeded.
Status RandomBytes(void* out, std::size_t size);

// A random value for what must not fail and need not be secret (the seed of a sequence of ids
// or of a jitter generator, the random bits of a UUID): RandomBytes, or where it fails the
// monotonic clock mixed with the pid, which still differs between a parent and its child.
uint64_t RandomSeed();

}  // namespace idem::util

#endif  // IDEM_UTIL_RANDOM_H_
