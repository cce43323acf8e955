// `idem backup`, `idem export` and `idem import` (run in-process through idem::cli::Run), and the
// conversion of a MySQL dedup table and Redis locks into the export format
// (scripts/idem_convert.py): a backup taken while four processes write, then opened and checked
// against what they acknowledged; a destination that exists; an export imported into a new store
// and exported again, byte for byte; lines refused with their numbers and nothing written;
// tokens after an import.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"
#include "idem/idem.h"
#include "support/backend.h"
#include "support/cli_run.h"
#include "support/file_text.h"
#include "support/test_util.h"

namespace {

using idem_test::ReadFile;
using idem_test::WriteFile;

using idem::Holder;
using idem::Outcome;
using idem::Record;
using idem::State;
using idem_test::OpenStore;
using idem_test::TempDir;
using idem_test::TestOptions;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

using idem_test::CliResult;

CliResult RunCli(const std::vector<std::string>& args,
                 std::shared_ptr<const idem::Clock> clock = nullptr) {
  return idem_test::RunCliOn(args, std::move(clock));
}

std::vector<Record> AllRecords(idem::Store& store) {
  std::vector<Record> records;
  const idem::Status scanned = store.Scan({}, [&](const Record& record) {
    records.push_back(record);
    return true;
  });
  EXPECT_TRUE(scanned.ok()) << scanned.ToString();
  return records;
}

// A program run with its standard output in a file; killed (if still running) when destroyed.
class Process {
 public:
  Process(const std::string& program, const std::vector<std::string>& args,
          const std::string& stdin_file = "/dev/null",
          const std::string& stdout_file = "/dev/null") {
    pid_ = ::fork();
    if (pid_ == 0) {
      const int in = ::open(stdin_file.c_str(), O_RDONLY);
      const int out = ::open(stdout_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (in < 0 || out < 0 || ::dup2(in, STDIN_FILENO) < 0 || ::dup2(out, STDOUT_FILENO) < 0) {
        ::_exit(126);
      }
      std::vector<std::string> copy = {program};
      copy.insert(copy.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (std::string& arg : copy) argv.push_back(arg.data());
      argv.push_back(nullptr);
      ::execvp(program.c_str(), argv.data());
      ::_exit(127);
    }
  }
  ~Process() { Kill(); }
  pid_t pid() const { return pid_; }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  void Kill() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  // The exit code, or -1 when it did not exit normally.
  int Wait() {
    int status = 0;
    if (pid_ <= 0 || ::waitpid(pid_, &status, 0) != pid_) return -1;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
};

// The keys of the whole lines ("KEY RESULT\n") of a worker's acknowledgement log: calls that
// returned OK before the file was read.
std::map<std::string, std::string> Acknowledged(const std::string& path) {
  std::map<std::string, std::string> acked;
  const std::string text = ReadFile(path);
  std::size_t at = 0;
  for (std::size_t end; (end = text.find('\n', at)) != std::string::npos; at = end + 1) {
    const std::string line = text.substr(at, end - at);
    const std::size_t space = line.find(' ');
    if (space != std::string::npos) acked[line.substr(0, space)] = line.substr(space + 1);
  }
  return acked;
}

// ---- Backup ----------------------------------------------------------------------------------

// Four processes run Execute on keys of their own; one of them owns the store. Once each has
// acknowledged some, their acknowledgements are read, then this process (a client of that
// owner) takes a backup through it while they keep writing. The backup must hold every record
// acknowledged before it started, each as that worker left it, and every record in it must be
// whole: a done one with its worker's result, a pending one claimed with a token.
TEST(Backup, TakenThroughTheOwnerWhileFourProcessesWriteHoldsEveryAcknowledgedRecord) {
  TempDir dir;
  const std::string store = dir.StorePath();
  constexpr int kWorkers = 4;
  constexpr int kKeysEach = 100000;  // more than they write before they are stopped
  std::vector<std::unique_ptr<Process>> workers;
  std::vector<std::string> ack_logs;
  for (int w = 0; w < kWorkers; ++w) {
    ack_logs.push_back(dir.Sub("ack-" + std::to_string(w)));
    workers.push_back(std::make_unique<Process>(
        IDEM_SHARING_WORKER,
        std::vector<std::string>{"execute", store, std::to_string(w * kKeysEach),
                                 std::to_string((w + 1) * kKeysEach - 1),
                                 dir.Sub("run-" + std::to_string(w)), ack_logs.back()}));
  }
  const auto kBeforeBackup = static_cast<std::size_t>(idem_test::Scaled(200, 40));
  ASSERT_TRUE(idem_test::WaitFor(
      [&] {
        for (const std::string& log : ack_logs) {
          if (Acknowledged(log).size() < kBeforeBackup) return false;
        }
        return true;
      },
      60s))
      << "the workers did not acknowledge " << kBeforeBackup << " records each";

  // A worker owns the store (the lock file names it), so the backup goes through the owner.
  const std::string lock = ReadFile(store + "/owner.lock");
  bool a_worker_owns_it = false;
  for (const auto& worker : workers) {
    a_worker_owns_it |= lock.starts_with("pid " + std::to_string(worker->pid()) + "\n");
  }
  EXPECT_TRUE(a_worker_owns_it) << lock;

  std::map<std::string, std::string> acknowledged;
  for (const std::string& log : ack_logs) acknowledged.merge(Acknowledged(log));
  const std::string backup = dir.Sub("backup");
  const CliResult backed_up = RunCli({"backup", store, backup});
  ASSERT_EQ(backed_up.code, 0) << backed_up.err;
  EXPECT_EQ(backed_up.out, "backed up " + store + " to " + backup + "\n");
  // The workers still wrote after it: the backup was taken while they ran.
  const std::size_t before = acknowledged.size();
  ASSERT_TRUE(idem_test::WaitFor([&] {
    std::size_t now = 0;
    for (const std::string& log : ack_logs) now += Acknowledged(log).size();
    return now > before;
  }));
  for (auto& worker : workers) worker->Kill();

  // Private, as the store: the directory 0700, every file 0600.
  struct stat info {};
  ASSERT_EQ(::stat(backup.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
  for (const auto& entry : fs::recursive_directory_iterator(backup)) {
    ASSERT_EQ(::stat(entry.path().c_str(), &info), 0);
    EXPECT_EQ(info.st_mode & 0777, entry.is_directory() ? 0700u : 0600u) << entry.path();
  }

  // `idem dump` reads it (read-only, no owner: the files themselves).
  const CliResult dumped = RunCli({"dump", backup, "--format", "jsonl"});
  ASSERT_EQ(dumped.code, 0) << dumped.err;
  const std::size_t dumped_lines =
      static_cast<std::size_t>(std::count(dumped.out.begin(), dumped.out.end(), '\n'));

  auto opened = OpenStore(backup);
  ASSERT_NE(opened, nullptr);
  std::map<std::string, Record> in_backup;
  for (Record& record : AllRecords(*opened)) in_backup.emplace(record.key, std::move(record));
  EXPECT_EQ(in_backup.size(), dumped_lines);
  for (const auto& [key, result] : acknowledged) {
    const auto found = in_backup.find(key);
    ASSERT_NE(found, in_backup.end()) << key << " was acknowledged before the backup";
    EXPECT_EQ(found->second.state, State::kDone) << key;
    EXPECT_EQ(found->second.result, result) << key;
  }
  for (const auto& [key, record] : in_backup) {
    EXPECT_EQ(record.type, "test") << key;
    EXPECT_GE(record.attempts, 1u) << key;
    EXPECT_GT(record.token, 0u) << key;
    if (record.state == State::kDone) {
      EXPECT_EQ(record.result, "result-" + key) << key;
    } else {
      EXPECT_EQ(record.state, State::kPending) << key;
      EXPECT_EQ(record.result, "") << key;
    }
  }
  EXPECT_GE(in_backup.size(), acknowledged.size());

  // A writable store of its own: a new claim there gets a token above every token it holds.
  uint64_t highest = 0;
  for (const auto& [key, record] : in_backup) highest = std::max(highest, record.token);
  auto claim = opened->Begin("after-restore");
  ASSERT_TRUE(claim.ok()) << claim.status().ToString();
  EXPECT_GT(claim->token, highest);
}

TEST(Backup, TakenByTheCommandWhenNoProcessOwnsTheStore) {
  TempDir dir;
  {
    auto store = OpenStore(dir.StorePath());
    ASSERT_NE(store, nullptr);
    auto claim = store->Begin("k");
    ASSERT_TRUE(claim.ok());
    ASSERT_TRUE(store->Complete("k", claim->token, "v").ok());
  }
  // A relative destination is taken relative to the command's directory.
  const fs::path cwd = fs::current_path();
  fs::current_path(dir.path());
  const CliResult backed_up = RunCli({"backup", dir.StorePath(), "copy"});
  fs::current_path(cwd);
  ASSERT_EQ(backed_up.code, 0) << backed_up.err;
  // The format file comes along: a newer release's backup is refused before anything changes.
  EXPECT_EQ(ReadFile(dir.Sub("copy/db/IDEM-FORMAT")),
            ReadFile(dir.StorePath() + "/db/IDEM-FORMAT"));
  auto copy = OpenStore(dir.Sub("copy"));
  ASSERT_NE(copy, nullptr);
  auto record = copy->Get("k");
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_EQ((*record)->result, "v");
}

// A store with application tables is copied with them, at its format version (2).
TEST(Backup, CopiesTheApplicationTables) {
  TempDir dir;
  {
    auto store = OpenStore(dir.StorePath());
    ASSERT_NE(store, nullptr);
    auto claim = store->Begin("k");
    ASSERT_TRUE(claim.ok());
    idem::WriteSet writes;
    writes.Put("balances", "alice", "10");
    ASSERT_TRUE(store->Complete("k", claim->token, "v", writes).ok());
    ASSERT_TRUE(store->Backup(dir.Sub("copy")).ok());
  }
  EXPECT_EQ(ReadFile(dir.Sub("copy/db/IDEM-FORMAT")), "2\n");
  auto copy = OpenStore(dir.Sub("copy"));
  ASSERT_NE(copy, nullptr);
  auto value = copy->GetValue("balances", "alice");
  ASSERT_TRUE(value.ok()) << value.status().ToString();
  EXPECT_EQ(*value, (idem::TableValue{"10", 1}));
}

// On the store's file system the backup's table files are hard links to the store's; on another
// one (tmpfs under /dev/shm here) they are copies, as private as the store's.
TEST(Backup, LinksTableFilesOnTheSameFileSystemAndCopiesThemOnAnother) {
  TempDir dir;
  {
    auto store = OpenStore(dir.StorePath());
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 100; ++i) {
      const std::string key = "k" + std::to_string(i);
      auto claim = store->Begin(key);
      ASSERT_TRUE(claim.ok());
      ASSERT_TRUE(store->Complete(key, claim->token, "v").ok());
    }
  }
  struct stat here {
  }, shm{};
  if (::stat(dir.path().c_str(), &here) != 0 || ::stat("/dev/shm", &shm) != 0 ||
      here.st_dev == shm.st_dev) {
    GTEST_SKIP() << "/dev/shm is missing or on the same file system as " << dir.path();
  }
  TempDir other_parent;  // removed at the end; the backup goes on another file system
  const std::string elsewhere = "/dev/shm/" + fs::path(other_parent.path()).filename().string();
  const std::string same = dir.Sub("same");
  int linked = 0;
  // Each backup's table files are checked before the store is opened again: an open may compact
  // some away (the owner's start-up count reads a snapshot, and RocksDB rewrites the bottommost
  // files once it is released).
  const auto check = [&](const std::string& backup) {
    for (const auto& entry : fs::directory_iterator(backup + "/db")) {
      if (entry.path().extension() != ".sst") continue;
      struct stat info {};
      ASSERT_EQ(::stat(entry.path().c_str(), &info), 0);
      EXPECT_EQ(info.st_mode & 0777, 0600u) << entry.path();
      // A table file the store has is the same file as the backup's on the same file system,
      // and never on another one.
      struct stat original {};
      const std::string in_store = dir.StorePath() + "/db/" + entry.path().filename().string();
      if (::stat(in_store.c_str(), &original) != 0) continue;
      if (backup == same) {
        EXPECT_EQ(info.st_ino, original.st_ino) << entry.path();
        ++linked;
      } else {
        EXPECT_EQ(info.st_nlink, 1u) << entry.path();
      }
    }
  };
  ASSERT_EQ(RunCli({"backup", dir.StorePath(), same}).code, 0);
  check(same);
  const CliResult copied = RunCli({"backup", dir.StorePath(), elsewhere});
  ASSERT_EQ(copied.code, 0) << copied.err;
  check(elsewhere);
  for (const std::string& backup : {same, elsewhere}) {
    auto opened = OpenStore(backup);
    ASSERT_NE(opened, nullptr);
    EXPECT_EQ(AllRecords(*opened).size(), 100u) << backup;
  }
  EXPECT_GT(linked, 0);
  fs::remove_all(elsewhere);
}

// A backup holds the token counter as it was then; the store went on handing out tokens above
// it (here: after a reopen, which starts a new block at the backup's ceiling). Restored later, the
// copy starts its tokens at the time in microseconds, above those: no token comes twice.
TEST(Backup, ARestoredStoreNeverHandsOutATokenTheOldStoreHandedOutAfterTheBackup) {
  TempDir dir;
  auto clock = std::make_shared<idem_test::ManualClock>();
  const std::string backup = dir.Sub("backup");
  {
    auto store = OpenStore(dir.StorePath(), TestOptions(clock));
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Begin("before").ok());
    ASSERT_TRUE(store->Backup(backup).ok());
  }
  uint64_t later = 0;
  {
    auto store = OpenStore(dir.StorePath(), TestOptions(clock));
    ASSERT_NE(store, nullptr);
    auto claim = store->Begin("later");
    ASSERT_TRUE(claim.ok());
    later = claim->token;
  }
  clock->Advance(1s);
  auto restored = OpenStore(backup, TestOptions(clock));
  ASSERT_NE(restored, nullptr);
  auto claim = restored->Begin("again");
  ASSERT_TRUE(claim.ok());
  EXPECT_GT(claim->token, later) << "a token handed out after the backup came again";
}

TEST(Backup, RefusesADestinationThatExistsOrIsInsideTheStore) {
  TempDir dir;
  ASSERT_NE(OpenStore(dir.StorePath()), nullptr);
  const std::string directory = dir.Sub("existing-directory");
  ASSERT_TRUE(fs::create_directory(directory));
  const std::string file = dir.Sub("existing-file");
  WriteFile(file, "keep me");

  for (const std::string& destination : {directory, file}) {
    const CliResult refused = RunCli({"backup", dir.StorePath(), destination});
    EXPECT_EQ(refused.code, idem::cli::kExitStoreError) << destination;
    EXPECT_NE(refused.err.find("backup destination " + destination + " exists"), std::string::npos)
        << refused.err;
    EXPECT_EQ(refused.out, "");
  }
  EXPECT_TRUE(fs::is_empty(directory));
  EXPECT_EQ(ReadFile(file), "keep me");

  const CliResult inside = RunCli({"backup", dir.StorePath(), dir.StorePath() + "/copy"});
  EXPECT_EQ(inside.code, idem::cli::kExitStoreError);
  EXPECT_NE(inside.err.find("is inside the store"), std::string::npos) << inside.err;
  EXPECT_FALSE(fs::exists(dir.StorePath() + "/copy"));

  const CliResult no_parent = RunCli({"backup", dir.StorePath(), dir.Sub("missing/copy")});
  EXPECT_EQ(no_parent.code, idem::cli::kExitStoreError);
  EXPECT_NE(no_parent.err.find("its parent directory"), std::string::npos) << no_parent.err;

  const CliResult postgres = RunCli({"backup", "postgresql://app@db1/orders", dir.Sub("pg")});
  EXPECT_EQ(postgres.code, idem::cli::kExitUsage);
  EXPECT_NE(postgres.err.find("pg_dump"), std::string::npos) << postgres.err;
  EXPECT_FALSE(fs::exists(dir.Sub("pg")));
}

// ---- Export and import -----------------------------------------------------------------------

// Records in every state, with bytes that are not UTF-8 in each byte field, on a manual clock.
void FillVariedStore(idem::Store& store, idem_test::ManualClock& clock) {
  const std::string binary_key("bin\0\xff\x01", 6);
  auto done = store.Begin(binary_key, {.type = "t\xfe", .fingerprint = "fp"});
  ASSERT_TRUE(done.ok());
  ASSERT_TRUE(store.SaveCheckpoint(binary_key, done->token, std::string("cp\0\x80", 4)).ok());
  clock.Advance(1500us);
  ASSERT_TRUE(store.Complete(binary_key, done->token, std::string("\xfe\xff r\n\"q\"\\", 9)).ok());
  auto retryable = store.Begin("failed-retryable", {.type = "pay"});
  ASSERT_TRUE(retryable.ok());
  ASSERT_TRUE(store.Fail("failed-retryable", retryable->token, "timeout").ok());
  auto terminal = store.Begin("failed-terminal", {.type = "pay"});
  ASSERT_TRUE(terminal.ok());
  ASSERT_TRUE(
      store.Fail("failed-terminal", terminal->token, "declined", idem::Failure::kTerminal).ok());
  auto retried = store.Begin("failed-retryable", {.type = "pay"});  // attempts 2
  ASSERT_TRUE(retried.ok());
  ASSERT_TRUE(store.Fail("failed-retryable", retried->token, "timeout again").ok());
  ASSERT_TRUE(store.Begin("timed-out", {.lease = 1s}).ok());
  clock.Advance(2s);
  ASSERT_TRUE(store.Begin("pending \xc3\xa9t\xc3\xa9", {.lease = 1h}).ok());
}

// The import's target: a new store of each backend (a store directory, or tables in PostgreSQL).
class ImportInto : public idem_test::OnEachBackend {};

// `args` with the store `target` (its directory, or URI and --table) inserted after the command.
std::vector<std::string> Command(const std::string& command, const idem_test::TestStore& target,
                                 const std::vector<std::string>& args = {}) {
  std::vector<std::string> all = {command};
  const std::vector<std::string> store = target.CommandArgs();
  all.insert(all.end(), store.begin(), store.end());
  all.insert(all.end(), args.begin(), args.end());
  return all;
}

TEST_P(ImportInto, ANewStoreThatExportsTheSameBytes) {
  TempDir dir;
  auto clock = std::make_shared<idem_test::ManualClock>();
  const std::string source = dir.Sub("source");
  {
    auto store = OpenStore(source, TestOptions(clock));
    ASSERT_NE(store, nullptr);
    FillVariedStore(*store, *clock);
  }
  const std::string first = dir.Sub("first.jsonl");
  const CliResult exported = RunCli({"export", source, "--output", first}, clock);
  ASSERT_EQ(exported.code, 0) << exported.err;
  EXPECT_EQ(exported.out, "exported 5 records to " + first + "\n");
  struct stat info {};
  ASSERT_EQ(::stat(first.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 2)
      << "no temporary file is left beside the output";
  const std::string text = ReadFile(first);
  EXPECT_NE(text.find(R"("key":{"hex":"62696e00ff01"})"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("state":"pending")"), std::string::npos) << "timed out: stored pending";
  EXPECT_NE(text.find(R"("retryable":true)"), std::string::npos);

  const idem_test::TestStore copy(GetParam());
  const CliResult imported = RunCli(Command("import", copy, {first, "--create"}), clock);
  ASSERT_EQ(imported.code, 0) << imported.err;
  EXPECT_EQ(imported.out, "imported 5 records\n");
  const CliResult again = RunCli(Command("export", copy), clock);  // to standard output
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.out, text);

  // And what the records are, by the API: equal, holder and all. Without the renewal grace that
  // a new owner gives claims whose lease ran out (docs/semantics.md), so that the timed-out claim
  // is taken over at once.
  idem::Options options = TestOptions(clock);
  options.renewal_grace = 0ms;
  auto original = OpenStore(source, options);
  auto restored = copy.Open(options);
  ASSERT_NE(original, nullptr);
  ASSERT_NE(restored, nullptr);
  EXPECT_EQ(AllRecords(*restored), AllRecords(*original));
  // They behave as they did: a replay, a terminal failure, a takeover of the timed-out one.
  auto replay = restored->Begin(std::string("bin\0\xff\x01", 6), {.fingerprint = "fp"});
  ASSERT_TRUE(replay.ok());
  EXPECT_EQ(replay->outcome, Outcome::kReplay);
  EXPECT_EQ(restored->Begin("failed-terminal")->outcome, Outcome::kFailed);
  auto takeover = restored->Begin("timed-out");
  ASSERT_TRUE(takeover.ok());
  EXPECT_EQ(takeover->outcome, Outcome::kAcquired);
  EXPECT_TRUE(takeover->took_over);
}

// The application tables go with the records: export writes their values (after the records,
// table by table, versions kept; deleted keys left out), import writes them into the new store,
// and refuses a key written there already (or leaves it, with --skip-existing) or named twice.
TEST(ExportImport, ApplicationTablesGoWithTheRecords) {
  TempDir dir;
  const std::string source = dir.Sub("source");
  const std::string binary_key("k\0\xff", 3);
  const std::string binary_value("\xfe\x01", 2);
  {
    auto store = OpenStore(source);
    ASSERT_NE(store, nullptr);
    auto first = store->Begin("m1");
    ASSERT_TRUE(first.ok());
    idem::WriteSet writes;
    writes.Put("balances", "alice", "10");
    writes.Put("balances", "bob", "5");
    writes.Put("log", binary_key, binary_value);
    ASSERT_TRUE(store->Complete("m1", first->token, "ok", writes).ok());
    auto second = store->Begin("m2");
    ASSERT_TRUE(second.ok());
    idem::WriteSet more;
    more.Put("balances", "alice", "11", 1);
    more.Delete("balances", "bob");
    ASSERT_TRUE(store->Complete("m2", second->token, "ok", more).ok());
  }
  const std::string exported = dir.Sub("export.jsonl");
  CliResult result = RunCli({"export", source, "--output", exported});
  ASSERT_EQ(result.code, 0) << result.err;
  EXPECT_EQ(result.out, "exported 2 records and 2 table values to " + exported + "\n");
  EXPECT_NE(
      ReadFile(exported).find(R"({"table":"balances","key":"alice","value":"11","version":2})"),
      std::string::npos)
      << ReadFile(exported);

  const std::string target = dir.Sub("target");
  result = RunCli({"import", target, exported, "--create"});
  ASSERT_EQ(result.code, 0) << result.err;
  EXPECT_EQ(result.out, "imported 2 records; 2 table values\n");
  {
    auto store = OpenStore(target);
    ASSERT_NE(store, nullptr);
    auto tables = store->ListTables();
    ASSERT_TRUE(tables.ok()) << tables.status().ToString();
    EXPECT_EQ(*tables, (std::vector<std::string>{"balances", "log"}));
    EXPECT_EQ(store->GetValue("balances", "alice").value(), (idem::TableValue{"11", 2}));
    EXPECT_EQ(store->GetValue("balances", "bob").value(), idem::TableValue{});
    EXPECT_EQ(store->GetValue("log", binary_key).value(), (idem::TableValue{binary_value, 1}));
    // A conditional write on the imported version applies, as it would have in the source.
    auto claim = store->Begin("m3");
    ASSERT_TRUE(claim.ok());
    idem::WriteSet next;
    next.Put("balances", "alice", "12", 2);
    EXPECT_TRUE(store->Complete("m3", claim->token, "ok", next).ok());
  }
  // Again: the values are in the target now.
  const std::string values_only = dir.Sub("values.jsonl");
  WriteFile(values_only, R"({"table":"balances","key":"alice","value":"1","version":1})"
                         "\n");
  result = RunCli({"import", target, values_only});
  EXPECT_EQ(result.code, idem::cli::kExitInputRefused) << result.err;
  EXPECT_NE(result.err.find("line 1: key 'alice' of table balances was written in the store"),
            std::string::npos)
      << result.err;
  result = RunCli({"import", target, values_only, "--skip-existing"});
  EXPECT_EQ(result.code, 0) << result.err;
  EXPECT_EQ(result.out,
            "imported 0 records; 1 table values left as they were (written in the "
            "store)\n");
  for (const auto& [input, message] : std::vector<std::pair<std::string, std::string>>{
           {R"({"table":"t","key":"k","value":"v","version":1})"
            "\n"
            R"({"table":"t","key":"k","value":"w","version":2})",
            "line 2: key 'k' of table t is also on line 1"},
           {R"({"table":"t","key":"k","value":"v"})", "line 1: version: missing"},
           {R"({"table":"t","key":"k","value":"v","version":0})", "version: must be at least 1"},
           {R"({"table":"bad name","key":"k","value":"v","version":1})", "table name"},
           {R"({"table":"t","key":"k","value":"v","version":1,"colour":"red"})",
            "colour: is not a field of a table value"}}) {
    WriteFile(values_only, input);
    result = RunCli({"import", target, values_only});
    EXPECT_EQ(result.code, idem::cli::kExitInputRefused) << message << "\n" << result.err;
    EXPECT_NE(result.err.find(message), std::string::npos) << result.err;
  }
}

TEST(ExportImport, ImportRefusesABadLineOrAKeyTheStoreHoldsAndWritesNothing) {
  TempDir dir;
  const std::string store = dir.StorePath();
  {
    auto opened = OpenStore(store);
    ASSERT_NE(opened, nullptr);
    auto claim = opened->Begin("a");
    ASSERT_TRUE(claim.ok());
    ASSERT_TRUE(opened->Complete("a", claim->token, "kept").ok());
  }
  const std::string good = R"({"key":"b","state":"done","result":"new"})";
  struct Case {
    std::string input;
    std::string message;  // expected on stderr
  };
  const std::vector<Case> cases = {
      {good + "\n" + R"({"key":"a","state":"done","result":"other"})" + "\n",
       "line 2: key 'a' is in the store already"},
      {good + "\n\n" + R"({"key":"c","state":"bogus"})" + "\n",
       "line 3: state: must be \"pending\", \"done\" or \"failed\""},
      {good + "\n" + "{not json\n", "line 2: not JSON"},
      {good + "\n" + good + "\n", "line 2: key 'b' is also on line 1"},
      {good + "\n" + R"({"key":"d","state":"done","colour":"red"})",
       "line 2: colour: is not a field"},
      {R"({"key":"e","state":"done","retryable":true})", "line 1: retryable: may be true only"},
      {R"({"key":"f","state":"done","token":-3})", "line 1: token: must be a whole number"},
      {R"({"key":"g","state":"done","created":"2026-13-01T00:00:00Z"})",
       "line 1: created: must be an RFC 3339 time"},
      {R"({"key":{"hex":"0g"},"state":"done"})", "line 1: key: \"hex\" is not pairs of hex"},
      {R"({"key":")" + std::string(513, 'k') + R"(","state":"done"})",
       "line 1: key: 513 bytes; the limit is 512"},
      // What a lenient reader takes silently (issue 40): a NUL byte, where a reader that stops
      // there imports the first record and drops the second; a member named twice.
      {good + "\n" + R"({"key":"n1","state":"done"})" + std::string(1, '\0') +
           R"({"key":"n2","state":"done"})",
       "line 2: a NUL byte at byte 28 of the line"},
      {R"({"key":"a1","key":"b1","state":"done"})", "line 1: key: is given twice"},
      {R"({"key":"h","state":"done","holder":{"pid":1,"pid":2}})", "line 1: pid: is given twice"},
      {R"({"table":"t","table":"u","key":"k","value":"v","version":1})",
       "line 1: table: is given twice"},
      // The holder's and the counts' own rules, pinned before the field list is shared.
      {R"({"key":"p","state":"pending","holder":{"pid":-1}})",
       "line 1: holder.pid: must be a whole number from 0 to 4294967295"},
      {R"({"key":"p","state":"pending","holder":{"colour":1}})",
       "line 1: holder.colour: is not a field of the holder (pid, process_start, pid_scope, "
       "request_id, took_over)"},
      {R"({"key":"p","state":"done","attempts":0})",
       "line 1: attempts: must be at least 1 (a record was acquired once)"},
  };
  for (const Case& c : cases) {
    const std::string input = dir.Sub("input.jsonl");
    WriteFile(input, c.input);
    const CliResult refused = RunCli({"import", store, input});
    EXPECT_EQ(refused.code, idem::cli::kExitInputRefused) << c.message << "\n" << refused.err;
    EXPECT_NE(refused.err.find(c.message), std::string::npos) << refused.err;
    EXPECT_NE(refused.err.find("nothing was imported"), std::string::npos) << refused.err;
    auto opened = OpenStore(store);
    ASSERT_NE(opened, nullptr);
    std::vector<std::string> keys;
    for (const Record& record : AllRecords(*opened)) keys.push_back(record.key);
    EXPECT_EQ(keys, std::vector<std::string>{"a"}) << c.message;
  }

  // --skip-existing: "a" stays as it was, "b" comes in.
  const std::string input = dir.Sub("input.jsonl");
  WriteFile(input, good + "\n" + R"({"key":"a","state":"done","result":"other"})" + "\n");
  const CliResult skipped = RunCli({"import", store, input, "--skip-existing"});
  ASSERT_EQ(skipped.code, 0) << skipped.err;
  EXPECT_EQ(skipped.out, "imported 1 records; 1 left as they were (key in the store)\n");
  auto opened = OpenStore(store);
  ASSERT_NE(opened, nullptr);
  EXPECT_EQ((*opened->Get("a"))->result, "kept");
  EXPECT_EQ((*opened->Get("b"))->result, "new");
}

// "timeout" is the state `idem dump` and `idem stats` show for a pending record whose lease ran
// out. It is derived from the lease, so import reads it as the pending record it is, and export
// writes the stored state (docs/format.md).
TEST(ExportImport, ImportReadsATimedOutStateAsPending) {
  TempDir dir;
  const std::string store = dir.Sub("store");
  const std::string input = dir.Sub("input.jsonl");
  WriteFile(input, R"({"key":"t","state":"timeout","token":7,"attempts":1,)"
                   R"("created":"2026-01-01T00:00:00Z","lease_deadline":"2026-01-01T00:00:30Z",)"
                   R"("expires":"2099-01-01T00:00:00Z"})"
                   "\n");
  const CliResult imported = RunCli({"import", "--create", store, input});
  ASSERT_EQ(imported.code, 0) << imported.err;
  auto opened = OpenStore(store);
  ASSERT_NE(opened, nullptr);
  auto stored = opened->Get("t");
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ((*stored)->state, State::kPending);
  EXPECT_TRUE((*stored)->timed_out);
  EXPECT_EQ((*stored)->token, 7u);
  opened.reset();
  const CliResult exported = RunCli({"export", store});
  ASSERT_EQ(exported.code, 0) << exported.err;
  EXPECT_NE(exported.out.find(R"("key":"t","type":"","state":"pending",)"), std::string::npos)
      << exported.out;
}

TEST(ExportImport, ImportNeedsTheStoreToItselfAndAStoreUnlessCreate) {
  TempDir dir;
  const std::string input = dir.Sub("input.jsonl");
  WriteFile(input, R"({"key":"k","state":"done"})");
  // --table names a table in PostgreSQL: with a directory it is a usage error.
  const CliResult table = RunCli({"import", dir.StorePath(), input, "--table", "t", "--create"});
  EXPECT_EQ(table.code, idem::cli::kExitUsage);
  EXPECT_NE(table.err.find("--table applies to a postgresql:// store"), std::string::npos)
      << table.err;
  const CliResult missing = RunCli({"import", dir.StorePath(), input});
  EXPECT_EQ(missing.code, idem::cli::kExitStoreError) << missing.err;
  EXPECT_FALSE(fs::exists(dir.StorePath()));

  ASSERT_NE(OpenStore(dir.StorePath()), nullptr);  // made, then closed
  // Another process holds it (and owns it: the first to open it).
  const std::string said = dir.Sub("worker.out");
  auto holder = std::make_unique<Process>(IDEM_SHARING_WORKER,
                                          std::vector<std::string>{"open", dir.StorePath(), "auto"},
                                          "/dev/null", said);
  ASSERT_TRUE(idem_test::WaitFor([&] { return ReadFile(said) == "open\n"; })) << ReadFile(said);
  const CliResult busy = RunCli({"import", dir.StorePath(), input});
  EXPECT_EQ(busy.code, idem::cli::kExitStoreError);
  EXPECT_NE(busy.err.find("import needs the store to itself"), std::string::npos) << busy.err;
  holder.reset();
  const CliResult imported = RunCli({"import", dir.StorePath(), input});
  EXPECT_EQ(imported.code, 0) << imported.err;
}

// Store::Import writes only in the process that owns the store: a handle that talks to another
// process's owner gets kBusy and nothing is written; the owner's own handle imports, leaving a
// live record as it is and not writing one whose retention has passed.
// A record to import: done, created now by the system clock, kept an hour.
Record DoneRecord(const std::string& key, uint64_t token) {
  Record record;
  record.key = key;
  record.state = State::kDone;
  record.result = "r";
  record.attempts = 1;
  record.token = token;
  record.created = record.updated = record.lease_deadline = std::chrono::system_clock::now();
  record.expires = record.created + 1h;
  return record;
}

TEST(ExportImport, StoreImportIsTheOwners) {
  TempDir dir;
  ASSERT_NE(OpenStore(dir.StorePath()), nullptr);  // made, then closed
  const std::string said = dir.Sub("worker.out");
  auto owner = std::make_unique<Process>(IDEM_SHARING_WORKER,
                                         std::vector<std::string>{"open", dir.StorePath(), "auto"},
                                         "/dev/null", said);
  ASSERT_TRUE(idem_test::WaitFor([&] { return ReadFile(said) == "open\n"; })) << ReadFile(said);
  auto client = OpenStore(dir.StorePath());
  ASSERT_NE(client, nullptr);
  auto refused = client->Import(std::vector<Record>{DoneRecord("k", 12)});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), idem::Status::Code::kBusy) << refused.status().ToString();
  EXPECT_FALSE(client->Get("k")->has_value());
}

TEST_P(ImportInto, AStoreSaysWhatItLeftAndChecksEveryRecordFirst) {
  const idem_test::TestStore target(GetParam());
  auto store = target.Open(TestOptions());
  ASSERT_NE(store, nullptr);
  auto claim = store->Begin("live");
  ASSERT_TRUE(claim.ok());
  const Record record = DoneRecord("k", 12);
  Record live = DoneRecord("live", 12);
  Record expired = DoneRecord("expired", 12);
  expired.expires = record.created - 1s;
  auto outcomes = store->Import(std::vector<Record>{record, live, expired});
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
  EXPECT_EQ(*outcomes, (std::vector<idem::ImportOutcome>{idem::ImportOutcome::kImported,
                                                         idem::ImportOutcome::kPresent,
                                                         idem::ImportOutcome::kExpired}));
  EXPECT_EQ((*store->Get("k"))->result, "r");
  EXPECT_EQ((*store->Get("live"))->state, State::kPending);
  EXPECT_FALSE(store->Get("expired")->has_value());
  // A bad record fails the call before anything is written.
  Record bad = DoneRecord("bad", 12);
  bad.retryable = true;  // only a failed record may be
  auto invalid = store->Import(std::vector<Record>{DoneRecord("good", 12), bad});
  ASSERT_FALSE(invalid.ok());
  EXPECT_EQ(invalid.status().code(), idem::Status::Code::kInvalidArgument);
  EXPECT_NE(invalid.status().message().find("only a failed record can be retryable"),
            std::string::npos)
      << invalid.status().message();
  EXPECT_FALSE(store->Get("good")->has_value());
}

// One call of many records (more than a RocksDB store writes together, 32), a key given twice in
// it: the first is written, the second left (kPresent), whether the two are neighbours or far
// apart; every record is there with its own result.
TEST_P(ImportInto, ALongCallKeepsTheFirstOfAKeyGivenTwice) {
  const idem_test::TestStore target(GetParam());
  auto store = target.Open(TestOptions());
  ASSERT_NE(store, nullptr);
  std::vector<Record> records;
  std::vector<idem::ImportOutcome> expected;
  for (int i = 0; i < 100; ++i) {
    records.push_back(DoneRecord("k" + std::to_string(i), 100 + i));
    records.back().result = "first " + std::to_string(i);
    expected.push_back(idem::ImportOutcome::kImported);
  }
  for (const int again : {99, 0, 40}) {
    Record repeated = DoneRecord("k" + std::to_string(again), 300 + again);
    repeated.result = "second";
    records.insert(records.begin() + (again == 0 ? 70 : again + 1), repeated);
    expected.insert(expected.begin() + (again == 0 ? 70 : again + 1),
                    idem::ImportOutcome::kPresent);
  }
  ASSERT_OK_AND_ASSIGN(const auto outcomes, store->Import(records));
  EXPECT_EQ(outcomes, expected);
  for (int i = 0; i < 100; ++i) {
    ASSERT_OK_AND_ASSIGN(const auto stored, store->Get("k" + std::to_string(i)));
    ASSERT_TRUE(stored.has_value()) << i;
    EXPECT_EQ(stored->result, "first " + std::to_string(i));
    EXPECT_EQ(stored->token, 100u + i);
  }
}

// An import leaves records as the store's own transitions do: a record that is not pending keeps
// no holder (but whether its attempt took over), whatever the file says; a pending one keeps it.
TEST_P(ImportInto, ARecordThatIsNotPendingKeepsNoHolder) {
  const idem_test::TestStore target(GetParam());
  auto store = target.Open(TestOptions());
  ASSERT_NE(store, nullptr);
  const Holder holder{
      .pid = 1234, .process_start = 5, .pid_scope = 7, .request_id = 9, .took_over = true};
  Record done = DoneRecord("done", 12);
  Record failed = DoneRecord("failed", 13);
  failed.state = State::kFailed;
  failed.result = "declined";
  Record pending = DoneRecord("pending", 14);
  pending.state = State::kPending;
  pending.result.clear();
  pending.lease_deadline = pending.created + 1h;
  for (Record* record : {&done, &failed, &pending}) record->holder = holder;
  auto outcomes = store->Import(std::vector<Record>{done, failed, pending});
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
  for (const char* key : {"done", "failed"}) {
    auto stored = store->Get(key);
    ASSERT_TRUE(stored.ok() && stored->has_value()) << key;
    EXPECT_EQ((*stored)->holder, Holder{.took_over = true}) << key;
  }
  auto stored = store->Get("pending");
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ((*stored)->holder, holder);
}

TEST_P(ImportInto, AStoreWhoseLaterTokensAreAboveEveryImportedToken) {
  TempDir dir;
  const idem_test::TestStore target(GetParam());
  // Above the time in microseconds, where a store's tokens start.
  const uint64_t imported_token = (uint64_t{1} << 60) + 7;
  const std::string input = dir.Sub("input.jsonl");
  WriteFile(
      input,
      R"({"key":"high","state":"pending","lease_deadline":"2200-01-01T00:00:00Z","expires":"2200-01-02T00:00:00Z","token":)" +
          std::to_string(imported_token) + "}\n" +
          R"({"key":"fresh","state":"done","result":"r"})" + "\n");
  const CliResult imported = RunCli(Command("import", target, {input, "--create"}));
  ASSERT_EQ(imported.code, 0) << imported.err;
  {
    auto store = target.Open(TestOptions());
    ASSERT_NE(store, nullptr);
    EXPECT_EQ((*store->Get("high"))->token, imported_token);
    const uint64_t fresh = (*store->Get("fresh"))->token;  // none given: a fresh one
    EXPECT_GT(fresh, 0u);
    EXPECT_NE(fresh, imported_token);
    auto claim = store->Begin("new");
    ASSERT_TRUE(claim.ok());
    EXPECT_GT(claim->token, imported_token);
    // The imported claim holds its key (its lease is live) and fences with its token.
    EXPECT_EQ(store->Begin("high")->outcome, Outcome::kInProgress);
    EXPECT_TRUE(store->Complete("high", imported_token, "done").ok());
  }
  // Also after the store is opened again: the ceiling was persisted.
  auto reopened = target.Open(TestOptions());
  ASSERT_NE(reopened, nullptr);
  auto claim = reopened->Begin("after-reopen");
  ASSERT_TRUE(claim.ok());
  EXPECT_GT(claim->token, imported_token);
}

IDEM_ON_EACH_BACKEND(ImportInto);

// ---- Moving from MySQL and Redis ---------------------------------------------------------------

// Runs scripts/idem_convert.py with `args`, `input` on its standard input; its output, or
// nullopt (with a test failure) when it fails. Skips without python3.
std::optional<std::string> Convert(const TempDir& dir, const std::vector<std::string>& args,
                                   const std::string& input) {
  const std::string in = dir.Sub("convert.in");
  const std::string out = dir.Sub("convert.out");
  WriteFile(in, input);
  std::vector<std::string> all = {std::string(IDEM_SOURCE_DIR) + "/scripts/idem_convert.py"};
  all.insert(all.end(), args.begin(), args.end());
  Process python("python3", all, in, out);
  const int code = python.Wait();
  if (code == 127) return std::nullopt;
  EXPECT_EQ(code, 0) << ReadFile(out);
  if (code != 0) return std::nullopt;
  return ReadFile(out);
}

bool HavePython() { return std::system("python3 -c '' >/dev/null 2>&1") == 0; }

// The classic dedup table, as `mysql --batch --skip-column-names` prints it: a done row, a
// pending one (processing until 2099), a failed one whose error holds a tab and a newline
// (escaped by mysql), a NULL result, and a binary key; times in UTC+8.
TEST(Migration, MysqlDedupRowsConvertAndImport) {
  if (!HavePython()) GTEST_SKIP() << "python3 is not installed";
  TempDir dir;
  const std::string rows =
      std::string(
          "order-1\t1\tcharge ch_1\t2026-11-30 09:02:03.250\t2026-11-30 "
          "09:02:13\n"
          "order-2\t0\tNULL\t2026-11-30 09:02:04\t2099-01-01 08:00:00\n"
          "order-3\t2\tcard\\tdeclined\\n\t2026-11-30 09:02:05\t2026-11-30 "
          "09:02:15\n"
          "order-4\t1\tNULL\t2026-11-30 09:02:06\t2026-11-30 09:02:16\n") +
      std::string("bin\\0\xff\t1\tok\t2026-11-30 09:02:07\t2026-11-30 09:02:17\n");
  const std::optional<std::string> lines =
      Convert(dir, {"mysql-dedup", "--type", "pay", "--utc-offset", "+08:00"}, rows);
  ASSERT_TRUE(lines.has_value());
  const std::string input = dir.Sub("dedup.jsonl");
  WriteFile(input, *lines);
  // On a clock inside the rows' retention (30 days from 2026-11-30).
  auto clock = std::make_shared<idem_test::ManualClock>(
      std::chrono::sys_days(std::chrono::year(2026) / 12 / 1) + 0s);
  const CliResult imported = RunCli({"import", dir.StorePath(), input, "--create"}, clock);
  ASSERT_EQ(imported.code, 0) << imported.err << *lines;
  EXPECT_EQ(imported.out, "imported 5 records\n");

  auto store = OpenStore(dir.StorePath(), TestOptions(clock));
  ASSERT_NE(store, nullptr);
  // A UTC time: day of November or December 2026 (or 2099-01-01), and the time of day.
  const auto at = [](std::chrono::year_month_day day, std::chrono::microseconds time) {
    return std::chrono::system_clock::time_point(std::chrono::sys_days(day) + time);
  };
  using std::chrono::year;
  Record done = **store->Get("order-1");
  EXPECT_EQ(done.state, State::kDone);
  EXPECT_EQ(done.result, "charge ch_1");
  EXPECT_EQ(done.type, "pay");
  EXPECT_EQ(done.created, at(year(2026) / 11 / 30, 1h + 2min + 3250ms));
  EXPECT_EQ(done.expires, at(year(2026) / 12 / 30, 1h + 2min + 3250ms));
  Record pending = **store->Get("order-2");
  EXPECT_EQ(pending.state, State::kPending);
  EXPECT_EQ(pending.lease_deadline, at(year(2099) / 1 / 1, 0h));
  Record failed = **store->Get("order-3");
  EXPECT_EQ(failed.state, State::kFailed);
  EXPECT_TRUE(failed.retryable);
  EXPECT_EQ(failed.result, "card\tdeclined\n");
  EXPECT_EQ((*store->Get("order-4"))->result, "");
  EXPECT_EQ((*store->Get(std::string("bin\0\xff", 5)))->result, "ok");
  // What the old service's retries now get from idem.
  EXPECT_EQ(store->Begin("order-1")->outcome, Outcome::kReplay);
  EXPECT_EQ(store->Begin("order-2")->outcome, Outcome::kInProgress);
  EXPECT_EQ(store->Begin("order-3")->outcome, Outcome::kAcquired);

  // A row the script cannot read is named by its line.
  TempDir bad_dir;
  const std::string bad_in = bad_dir.Sub("convert.in");
  const std::string bad_out = bad_dir.Sub("convert.out");
  WriteFile(bad_in,
            "order-1\t1\tok\t2026-11-30 09:02:03\t2026-11-30 09:02:13\norder-2\t7\tx\t2026-11-30 "
            "09:02:03\t2026-11-30 09:02:13\n");
  Process python("python3",
                 {std::string(IDEM_SOURCE_DIR) + "/scripts/idem_convert.py", "mysql-dedup"}, bad_in,
                 bad_out);
  EXPECT_EQ(python.Wait(), 1);
}

// Redis locks (KEY<TAB>VALUE<TAB>PTTL): a live lock becomes a claim that holds its key until
// the lock would have expired; a value with the --done-prefix is a stored result.
TEST(Migration, RedisLocksConvertAndImport) {
  if (!HavePython()) GTEST_SKIP() << "python3 is not installed";
  TempDir dir;
  const std::optional<std::string> lines =
      Convert(dir, {"redis-lock", "--prefix", "lock:", "--done-prefix", "DONE:", "--type", "pay"},
              "lock:order-1\t3f2a9c\t600000\nlock:order-2\tDONE:charge ch_2\t86400000\n"
              "lock:order-3\tgone\t-2\n");
  ASSERT_TRUE(lines.has_value());
  const std::string input = dir.Sub("locks.jsonl");
  WriteFile(input, *lines);
  const CliResult imported = RunCli({"import", dir.StorePath(), input, "--create"});
  ASSERT_EQ(imported.code, 0) << imported.err << *lines;
  EXPECT_EQ(imported.out, "imported 2 records\n");
  auto store = OpenStore(dir.StorePath());
  ASSERT_NE(store, nullptr);
  auto locked = store->Begin("order-1");
  ASSERT_TRUE(locked.ok());
  EXPECT_EQ(locked->outcome, Outcome::kInProgress);
  EXPECT_GT(locked->retry_after, 500s);
  auto replay = store->Begin("order-2");
  ASSERT_TRUE(replay.ok());
  EXPECT_EQ(replay->outcome, Outcome::kReplay);
  EXPECT_EQ(replay->record.result, "charge ch_2");
  EXPECT_FALSE(store->Get("order-3")->has_value());
}

}  // namespace
