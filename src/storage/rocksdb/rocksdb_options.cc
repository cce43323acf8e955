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
  // runs one. With only one, a long job from level 5 into level 6 of a loaded store (about 100
  // MB, 3 s on 2 cores) held back every job out of level 0, which passed its slowdown trigger:
  // writes stalled. Measured on 2 cores, 10,000,000 records stored, three runs each: lifecycles
  // at 4 threads 0.74x-0.83x of an empty store's against 0.17x-0.25x, loading +13-18%; at 1
  // thread 0.65x-0.70x against 0.77x-0.78x (the second compaction takes its share of the cores
  // while the writes go on); peak RSS 81-88 MiB against 72-78 MiB (budget 96).
  db.max_background_jobs = 3;
  // On a machine with few cores the leader of each write group inserts the whole group into the
  // memtables. RocksDB's default has every writer insert its own batch in parallel after the
  // log write, and wait for the others to finish: with more writers than cores they wait for
  // each other to be scheduled (spinning in WriteThread::AwaitState, then futexes). Measured on
  // 2 cores, interleaved runs: 64 threads +45% (raw RocksDB) and +95% (idem) kBuffered
  // lifecycles, +65-90% kSync, client processes +27-35% at 16 and 64 threads; 1 and 4 threads
  // unchanged. Above 4 cores RocksDB's default stays (not measured here). The cores are those
  // the process may use: a container limited to 2 cores of a large machine is a small machine.
  db.allow_concurrent_memtable_write = util::UsableCores() > 4;
  // Writers queue twice: for the log write, then for the memtable insert, so that one group's
  // log write proceeds while the group before it is inserted (RocksDB's default has each group
  // do both before the next starts). Measured on 2 cores, three interleaved rounds of 2 s:
  // kBuffered lifecycles +24-37% at 4 to 64 threads for idem and for raw RocksDB alike (p50 at
  // 4 threads 11-12 us against 32 us; p99 there 0.43-0.46 ms against 0.09-0.10 ms), client
  // processes +7-10% at 16 threads; kSync and 1 thread unchanged. Not with unordered_write
  // (which would let a write become visible before an earlier one), which idem does not use.
  db.enable_pipelined_write = true;
  // A log file is deleted only once every column family with writes in it has flushed them.
  // The meta family gets a write now and then (a token ceiling) and is never full, so without
  // a bound RocksDB keeps every log since its last flush: its default bound, 4 x the sum of the
  // families' memtable sizes, is ~1 GiB here. Measured: 26 log files, 90 MB, after loading
  // 1,000,000 records, which also made the next open replay them all. Past this bound RocksDB
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
  // table's index, which a small cache could not keep (measured at 300k records: purge of 1%
  // took 0.30 s, reloading index blocks for each record it verified; partitioned, 0.022 s).
  table_options.index_type = rocksdb::BlockBasedTableOptions::kTwoLevelIndexSearch;
  table_options.partition_filters = true;
  table_options.metadata_block_size = 4096;
  table_options.pin_top_level_index_and_filter = true;
  table_options.cache_index_and_filter_blocks_with_high_priority = true;
  // A hash index in each data block: a point read finds its key in the block by one hash probe
  // instead of a binary search over restart points and a scan after it. Measured with the
  // replay workload (records read from table files): +15% at 1 thread, about 0.5 bytes more
  // per key in the block.
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
  // cache shrinks with it. Measured with 10,000,000 records (the benchmark's scale workload,
  // the peak reached while loading): peak RSS 74.7 / 76.5 MiB against 90.0 / 92.8 MiB (budget
  // 96); lifecycles on the loaded store, loading and purge within the noise.
  records.target_file_size_base = memory.table_file_size;
  records.level_compaction_dynamic_level_bytes = true;
  // A key is written twice in a row (Begin, then Complete), and request ids are often
  // time-ordered (UUIDv7, ULID): each insert lands next to the one before. With a hint RocksDB
  // starts the memtable's search from the last insert's position and climbs only as far as it
  // must; without one it searches from the top whenever the key is not after the last insert,
  // which the second write of a key never is (its newer entry sorts first). Measured: 16% fewer
  // instructions per lifecycle with time-ordered keys, and 5% less time with random ones.
  // The prefix (one byte) only names which remembered position to start from.
  records.memtable_insert_with_hint_prefix_extractor.reset(rocksdb::NewFixedPrefixTransform(1));
  // A Bloom filter over each memtable's whole keys. Most Begins look up a key no memtable holds
  // (a fresh request, or one completed long enough ago to be in a table file): without it each
  // such read searches every memtable's skip list, ~60 key comparisons each; with it, one probe.
  // 2% of the memtable's size (~125 KiB of a 6 MiB memtable), inside the memtable's budget.
  // Measured: +6-8% lifecycles at 1 thread, +15% replays of keys in table files.
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
