// Identity and liveness of processes on this host, for claims whose holder may have died.

#ifndef IDEM_UTIL_PROCESS_H_
#define IDEM_UTIL_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>

#include "idem/record.h"

namespace idem::util {

// The start time of process `pid` in clock ticks after boot (field 22 of /proc/PID/stat), or
// nullopt when it cannot be read: no such process, no /proc of this process's PID namespace, or
// no descriptor to read it with. A pid is reused only by a later-started process, so (pid,
// start time) names one process for the life of the host.
std::optional<uint64_t> ProcessStartTime(pid_t pid);

// Where this process's pids and start times mean something: a digest of the boot id, the PID
// namespace and the time namespace (/proc/PID/stat reports start times shifted by the reader's
// boot-time offset). Never 0 when known; 0 when it cannot be told (no /proc, a /proc of another
// PID namespace, no descriptor left). Computed once per process (after fork(), once more).
uint64_t PidScope();

// A random request id, never 0, fresh even in a forked child. No system call.
uint64_t RandomRequestId();

// How many fork()s separate this process from the one that first used idem: a value saved
// before a fork differs in the child. No system call.
uint64_t ForkGeneration();

// The cores this thread may run on: its CPU affinity (a container's cpuset), or the machine's
// online cores when the affinity cannot be read. At least 1.
unsigned UsableCores();

// This process as a holder. Its request_id is 0: each Begin call carries its own
// (BeginCall::request_id), which the backend sets.
Holder ThisProcessHolder();

// The holder `pid` (as this process's PID namespace numbers it; 0 when the kernel could not
// name it), for requests that arrive over the socket, whose pid comes from the kernel's
// SO_PEERCRED. Its request_id is 0, as ThisProcessHolder's.
Holder HolderFor(pid_t pid);

// True only when the holder's process is proven gone: it was recorded in this process's scope
// (same boot, same PID and time namespaces) and its pid is free (kill(pid, 0) fails with ESRCH)
// or now names a process started at another time. Any doubt (another scope, an unknown pid or
// scope, an unreadable start time, no descriptor left, EPERM) means alive: the claim then waits
// for its lease.
bool HolderIsDead(const Holder& holder);

}  // namespace idem::util

#endif  // IDEM_UTIL_PROCESS_H_
