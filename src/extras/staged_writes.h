// StagedWrites: what an attempt of Store::Execute read and staged through Attempt::Read, Put and
// Delete, as the WriteSet its Complete carries (extras/execute.cc).

#ifndef IDEM_EXTRAS_STAGED_WRITES_H_
#define IDEM_EXTRAS_STAGED_WRITES_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "api/reserving_store.h"
#include "idem/store.h"
#include "idem/tables.h"

namespace idem {

// An attempt's table reads and writes (Attempt::Read, Put, Delete): what it read, at which
// version, and what it will write, as the WriteSet its Complete carries.
class StagedWrites {
 public:
  explicit StagedWrites(Store& store) : store_(store) {}

  static Status OutsideExecute() {
    return Status::InvalidArgument(
        "Attempt::Read, Put and Delete stage table writes for Execute's Complete: call them "
        "inside Execute's fn (outside it, pass a WriteSet to Store::Complete)");
  }

  // A key read twice gives what the first read gave (or what this attempt put there since):
  // fn decides on one version of each key, the one its writes are conditional on.
  Result<TableValue> Read(std::string_view table, std::string_view key) {
    auto it = keys_.find(Name(table, key));
    if (it == keys_.end()) {
      IDEM_ASSIGN_OR_RETURN(TableValue value, store_.GetValue(table, key));
      it = keys_.emplace(Name(table, key), Key{}).first;
      it->second.read = true;
      it->second.value = std::move(value);
    } else if (!it->second.read) {
      // Put blind before this read: what it put, at the version nobody read (0).
      return TableValue{.value = it->second.value.value, .version = 0};
    }
    return it->second.value;
  }

  void Stage(std::string_view table, std::string_view key, std::optional<std::string> value) {
    const auto it = keys_.try_emplace(Name(table, key)).first;
    it->second.written = true;
    it->second.value.value = std::move(value);
  }

  // The writes staged, each conditional on the version read when the key was read first, and
  // every key read and not written required to be still at that version: the Complete commits
  // only if nothing fn read has changed (serializable).
  WriteSet writes() const {
    WriteSet writes;
    for (const auto& [name, entry] : keys_) {
      if (!entry.written) {
        writes.Require(name.first, name.second, entry.value.version);
        continue;
      }
      const std::optional<uint64_t> if_version =
          entry.read ? std::optional(entry.value.version) : std::nullopt;
      if (entry.value.value) {
        writes.Put(name.first, name.second, *entry.value.value, if_version);
      } else {
        writes.Delete(name.first, name.second, if_version);
      }
    }
    return writes;
  }

  void Clear() { keys_.clear(); }

  // Adds the keys read or staged to `into`.
  void AddKeysTo(std::set<TableKey>& into) const {
    for (const auto& [name, entry] : keys_) into.insert(name);
  }

 private:
  struct Key {
    bool read = false;     // read from the store: `value.version` is the version read
    bool written = false;  // staged: `value.value` is what to write (nullopt: delete)
    TableValue value;
  };

  using KeyName = TableKey;
  static KeyName Name(std::string_view table, std::string_view key) {
    return {std::string(table), std::string(key)};
  }

  Store& store_;
  std::map<KeyName, Key> keys_;
};

}  // namespace idem

#endif  // IDEM_EXTRAS_STAGED_WRITES_H_
