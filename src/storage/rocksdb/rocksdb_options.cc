#include "storage/rocksdb/rocksdb_options.h"

#include <rocksdb/cache.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>
#include <rocksdb/write_buffer_manager.h>

#include <memory>
#include <utility>

#include "storage/rocksdb/memory_split.h"
#include "util/process.h"

namespace idem::storage {
namespace {

// The database's: background jobs, how writers queue, the bound on its logs. The write buffer
// manager is set by MakeRocksDbOptions.
rocksdb::DBOptions MakeDbOptions(const MemorySplit& memory) {
  rocksdb::DBOptions db;
  // One flush and up to two compactions. RocksDB runs the second compaction only while it is
  // behind (level 0 past its speed-up count, or compaction debt), so a store written gently
  // runs one. With only one, a long job from level 5 into level 6 of a loaded store held back
  // every job out of level 0, which passed its slowdown trigger: writes stalled
  // (docs/design/speed.md, increment 8).
  db.max_background_jobs = 3;
  // On a machine with few cores the leader of each write group inserts the whole group into the
  // memtables. RocksDB's default has every writer insert its own batch in parallel after the
  // log write, and wait for the others to finish: with more writers than cores they wait for
  // each other to be scheduled (spinning in WriteThread::AwaitState, then futexes): measured
  // with many threads on 2 cores (docs/design/speed.md, increment 3). Above 4 cores RocksDB's
  // default stays (not measured here). The cores are those
  // the process may use: a container limited to 2 cores of a large machine is a small machine.
  db.allow_concurrent_memtable_write = util::UsableCores() > 4;
  // Writers queue twice: for the log write, then for the memtable insert, so that one group's
  // log write proceeds while the group before it is inserted (RocksDB's default has each group
  // do both before the next starts): faster from 4 threads up (docs/design/speed.md,
  // increment 7). Not with unordered_write
  // (which would let a write become visible before an earlier one), which idem does not use.
  db.enable_pipelined_write = true;
  // A log file is deleted only once every column family with writes in it has flushed them.
  // The meta family gets a write now and then (a token ceiling) and is never full, so without
  // a bound RocksDB keeps every log since its last flush: its default bound, 4 x the sum of the
  // families' memtable sizes, is ~1 GiB here, and the next open replays them all
  // (docs/design/speed.md, "Settings measured", N5). Past this bound RocksDB
  // flushes the families that hold the oldest log, so the logs stay a few memtables long.
  db.max_total_wal_size = 4 * memory.write_buffer_size;
  return db;
}

// The records' table files: filters, index and data blocks, cached in `cache`.
rocksdb::BlockBasedTableOptions MakeTableOptions(std::shared_ptr<rocksdb::Cache> cache) {
  rocksdb::BlockBasedTableOptions table_options;
  table_options.block_cache = std::move(cache);
  // Most Begins look up a key that does not exist yet: a Bloom filter answers without I/O.
  table_options.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table_options.cache_index_and_filter_blocks = true;
  table_options.pin_l0_filter_and_index_blocks_in_cache = true;
  // Partitioned index and filters: a point read loads one small partition instead of a whole
  // table's index, which a small cache could not keep (a purge reloaded whole index blocks for
  // each record it verified: docs/design/speed.md, "Settings measured", N6).
  table_options.index_type = rocksdb::BlockBasedTableOptions::kTwoLevelIndexSearch;
  table_options.partition_filters = true;
  table_options.metadata_block_size = 4096;
  table_options.pin_top_level_index_and_filter = true;
  table_options.cache_index_and_filter_blocks_with_high_priority = true;
  // A hash index in each data block: a point read finds its key in the block by one hash probe
  // instead of a binary search over restart points and a scan after it, for about 0.5 bytes
  // more per key in the block (docs/design/speed.md, increment 1).
  table_options.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
  return table_options;
}

// The records' column family: table format, memtable size and inserts, compaction.
rocksdb::ColumnFamilyOptions MakeRecordsOptions(const MemorySplit& memory,
                                                std::shared_ptr<rocksdb::Cache> cache) {
  rocksdb::ColumnFamilyOptions records;
  records.table_factory.reset(rocksdb::NewBlockBasedTableFactory(MakeTableOptions(cache)));
  records.write_buffer_size = memory.write_buffer_size;
  // 16 MiB at the default budget, against RocksDB's 64 MiB: what a compaction holds beside the
  // cache shrinks with it: a lower peak RSS while loading, at the same speed
  // (docs/design/speed.md, increment 15).
  records.target_file_size_base = memory.table_file_size;
  records.level_compaction_dynamic_level_bytes = true;
  // A key is written twice in a row (Begin, then Complete), and request ids are often
  // time-ordered (UUIDv7, ULID): each insert lands next to the one before. With a hint RocksDB
  // starts the memtable's search from the last insert's position and climbs only as far as it
  // must; without one it searches from the top whenever the key is not after the last insert,
  // which the second write of a key never is (its newer entry sorts first): docs/design/speed.md,
  // "Settings measured", N7.
  // The prefix (one byte) only names which remembered position to start from.
  records.memtable_insert_with_hint_prefix_extractor.reset(rocksdb::NewFixedPrefixTransform(1));
  // A Bloom filter over each memtable's whole keys. Most Begins look up a key no memtable holds
  // (a fresh request, or one completed long enough ago to be in a table file): without it each
  // such read searches every memtable's skip list, ~60 key comparisons each; with it, one probe.
  // 2% of the memtable's size (~125 KiB of a 6 MiB memtable), inside the memtable's budget
  // (docs/design/speed.md, increment 1).
  records.memtable_whole_key_filtering = true;
  records.memtable_prefix_bloom_size_ratio = 0.02;
  return records;
}

}  // namespace

RocksDbOptions MakeRocksDbOptions(std::size_t memory_budget) {
  const MemorySplit memory = SplitMemoryBudget(memory_budget);
  RocksDbOptions options;
  options.cache = rocksdb::NewLRUCache(memory.block_cache);
  options.write_buffers =
      std::make_shared<rocksdb::WriteBufferManager>(memory.write_buffers, options.cache);
  options.db = MakeDbOptions(memory);
  options.db.write_buffer_manager = options.write_buffers;
  options.records = MakeRecordsOptions(memory, options.cache);
  return options;
}

}  // namespace idem::storage
