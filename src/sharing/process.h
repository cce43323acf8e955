// Identity and liveness of processes on this host, for claims whose holder may have died.

#ifndef IDEM_SHARING_PROCESS_H_
#define IDEM_SHARING_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>

#include "idem/record.h"

namespace idem::sharing {

// The start time of process `pid` in clock ticks after boot (field 22 of /proc/PID/stat), or
// nullopt when there is no such process. A pid is reused only by a later-started process, so
// (pid, start time) names one process for the life of the host.
std::optional<uint64_t> ProcessStartTime(pid_t pid);

// A random request id, never 0, fresh even in a forked child. No system call.
uint64_t RandomRequestId();

// How many fork()s separate this process from the one that first used idem: a value saved
// before a fork differs in the child. No system call.
uint64_t ForkGeneration();

// This process as a holder, with a fresh random request id.
Holder ThisProcessHolder();

// The holder `pid` with a fresh random request id (for requests that arrive over the socket,
// whose pid comes from the kernel's SO_PEERCRED).
Holder HolderFor(pid_t pid);

// True when the holder's process is known to be gone: no such pid, or the pid now belongs to a
// process started at another time. False when unknown (pid 0) or alive.
bool HolderIsDead(const Holder& holder);

}  // namespace idem::sharing

#endif  // IDEM_SHARING_PROCESS_H_
