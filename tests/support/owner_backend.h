// The backend a store's owner makes over its own storage, for the tests that drive a storage
// below the Store API: an EngineBackend with a StallWatch (the renewal graces an owner gives).

#ifndef IDEM_TESTS_OWNER_BACKEND_H_
#define IDEM_TESTS_OWNER_BACKEND_H_

#include <memory>

#include "backend/engine_backend.h"
#include "backend/stall_watch.h"
#include "storage/storage.h"

namespace idem_test {

inline std::unique_ptr<idem::backend::EngineBackend> OwnerBackend(
    std::unique_ptr<idem::storage::Storage> storage, const idem::Options& options) {
  return std::make_unique<idem::backend::EngineBackend>(
      std::move(storage), options,
      std::make_unique<idem::backend::StallWatch>(options.clock, options.renewal_grace));
}

}  // namespace idem_test

#endif  // IDEM_TESTS_OWNER_BACKEND_H_
