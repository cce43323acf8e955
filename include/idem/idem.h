// Everything of the idem public API.

#ifndef IDEM_IDEM_H_
#define IDEM_IDEM_H_

#include "idem/counters.h"
#include "idem/function_ref.h"
#include "idem/log.h"
#include "idem/options.h"
#include "idem/record.h"
#include "idem/retry.h"
#include "idem/sql.h"
#include "idem/status.h"
#include "idem/store.h"
#include "idem/tables.h"

#endif  // IDEM_IDEM_H_
