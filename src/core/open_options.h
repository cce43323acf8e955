// The options Store::Open is given: checked, and compared with those of an earlier Open of the
// same store in the process (whose core, and so whose options, a later Open shares).

#ifndef IDEM_CORE_OPEN_OPTIONS_H_
#define IDEM_CORE_OPEN_OPTIONS_H_

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "idem/options.h"
#include "idem/status.h"

namespace idem::core {

// kInvalidArgument when `duration`, named `what`, is negative.
Status CheckDuration(std::string_view what, std::chrono::milliseconds duration);

// kInvalidArgument naming the first option out of its range.
Status CheckOptions(const Options& options);

// The options that are the store's in this process, not a handle's: the first Open decides
// them, and a later Open of the same store in this process gets the first's (docs/semantics.md,
// "Options of a store opened twice"). Each one a later Open asks differently, as "name value
// (this Open asked value)". `log` cannot be compared; the first Open's receives the store's
// warnings.
std::vector<std::string> DifferencesFromTheFirstOpen(const Options& first, const Options& later);

}  // namespace idem::core

#endif  // IDEM_CORE_OPEN_OPTIONS_H_
