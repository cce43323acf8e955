// Where `idem import` stages what it reads, and how the staged import reaches its store.
//
// The input is read once, into a staging store: a store of its own that starts empty, so that
// a key given twice is found there (it is present already) in bounded memory, whatever the
// input's size, and standard input needs no second reading.
//  - A new store directory (--create, PATH missing or an empty directory) is itself the staging
//    store: built aside as PATH.import-new (a sibling, on the same file system), then renamed
//    to PATH once whole and synced. A kill leaves no PATH, or the whole store; a refused input
//    leaves nothing.
//  - An existing store (or a store in PostgreSQL) gets the staged import copied into it once the
//    whole input has been checked. A store directory is first marked (kUnfinishedImportFile,
//    synced), so that a kill part way leaves a store that refuses to open until
//    `idem import PATH --finish` copies the rest from the staging store, which is kept in
//    PATH/import-staging until then.
// A staging directory left by a killed import whose mark was never written is removed by the
// next import that needs it.

#ifndef IDEM_TOOLS_IMPORT_STORE_H_
#define IDEM_TOOLS_IMPORT_STORE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "idem/options.h"
#include "idem/status.h"
#include "idem/store.h"
#include "progress_line.h"

namespace idem::cli {

// The sibling where a new store PATH is built (PATH.import-new), and the staging store of an
// import into the existing store directory PATH (PATH/import-staging).
inline constexpr char kNewStoreSuffix[] = ".import-new";
inline constexpr char kStagingDirectory[] = "import-staging";

// PATH as a directory path without trailing slashes.
std::string StoreDirectoryPath(const std::string& path);

// Whether `path` names no store yet: nothing is there, or an empty directory (not a symbolic
// link to one, nor the root of another file system).
bool IsNewStoreDirectory(const std::string& path);

// Opens `staging` (made empty: what a killed import left there is removed first) as a new store
// that this process holds alone, with the limits of `options`. kBusy when another import holds
// it; kInvalidArgument when it holds something that is not an idem store (then left as it is).
Result<std::unique_ptr<Store>> OpenEmptyStaging(const std::string& staging, Options options);

// Removes the staging directory (nothing when it is absent).
Status RemoveStaging(const std::string& staging);

// Where the staging store of an import into an existing store goes: inside the store directory
// (kept there with the mark until the import is finished), or a private temporary directory for
// a store in PostgreSQL.
Result<std::string> StagingPath(const std::string& path);

// Removes the staging store at `staging` of the import into `path`, and the temporary directory
// that held it for a store in PostgreSQL.
void RemoveStagingAndTemporary(const std::string& path, const std::string& staging);

// Renames the whole new store `aside` to `path` (which must still be missing, or the empty
// directory it was: never replacing a store made meanwhile) and syncs the parent directory.
Status InstallNewStore(const std::string& aside, const std::string& path);

// Removes the store directory's mark (kUnfinishedImportFile) and syncs the directory.
Status RemoveUnfinishedMark(const std::string& directory);

// What copying a staged import into its store did.
struct CopyCounts {
  uint64_t imported = 0, present = 0, expired = 0;
  uint64_t values_imported = 0, values_present = 0;
};

// Copies every record and table value of `staging` into `target`, in batches, each durable
// (Store::Import, Store::ImportValues): a key `target` holds is left as it is (counted present).
// `progress` shows how many are copied, of `staged` (0: not known), erased at the start and the
// end.
Status CopyStaged(Store& staging, Store& target, CopyCounts& counts, ProgressLine& progress,
                  uint64_t staged);

}  // namespace idem::cli

#endif  // IDEM_TOOLS_IMPORT_STORE_H_
