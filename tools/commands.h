// The subcommands of `idem`, each in its own file (command_<name>.cc), called by Run (cli.cc)
// once the arguments are parsed. Each returns the process exit code (ExitCode in cli.h).

#ifndef IDEM_TOOLS_COMMANDS_H_
#define IDEM_TOOLS_COMMANDS_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "context.h"

namespace idem::cli {

// How the commands that write or copy a store end (summary.h): --format and --quiet.
struct SummaryArgs {
  std::string format = "text";  // text or json
  bool quiet = false;           // print nothing on success
};

struct DumpArgs {
  std::string path;
  std::string app_table;  // --table with a store directory: list this application table
  std::string state;      // empty: any
  std::string type;
  bool has_type = false;
  std::string prefix;
  std::string format;
  int64_t limit = 0;  // 0: no limit
};

struct GetArgs {
  std::string path;
  std::string app_table;  // --table with a store directory: a key of this application table
  std::string key;
  bool hex_key = false;
  std::string format;
};

struct StatsArgs {
  std::string path;
  std::string format;
  std::string output;  // --output FILE: replaced atomically; empty: standard output
};

struct PurgeArgs {
  std::string path;
  bool dry_run = false;
  SummaryArgs summary;
};

struct ForgetArgs {
  std::string path;
  std::string key;  // empty: a selection or --keys-from
  bool hex_key = false;
  // A selection: records matching every filter given.
  std::string state;  // empty: any
  std::string type;
  bool has_type = false;
  std::string prefix;
  std::string older_than;            // as given; parsed into `age`
  std::chrono::milliseconds age{0};  // 0: any age
  std::string keys_from;             // a file of keys, one a line, or "-": standard input
  bool dry_run = false;
  SummaryArgs summary;
};

struct BackupArgs {
  std::string path;
  std::string destination;
  bool verify = false;  // --verify: check the copy (Store::Check) once it is made
  SummaryArgs summary;
};

struct ExportArgs {
  std::string path;
  std::string output;  // --output FILE: replaced atomically; empty: standard output
  SummaryArgs summary;
};

struct ImportArgs {
  std::string path;
  std::string input = "-";  // a file, or "-": standard input
  bool skip_existing = false;
  bool create = false;  // --create: make the store when PATH has none
  bool finish = false;  // --finish: finish an import that was stopped part way
  SummaryArgs summary;
};

struct CheckArgs {
  std::string path;
  std::string format;
  std::string scratch;  // --scratch DIR: where the copy of an owned store goes; empty: beside it
};

struct PingArgs {
  std::string path;
  bool quiet = false;
};

int Dump(const Context& ctx, const DumpArgs& args);
int Get(const Context& ctx, const GetArgs& args);
int Stats(const Context& ctx, const StatsArgs& args);
int Purge(const Context& ctx, const PurgeArgs& args);
int Forget(const Context& ctx, const ForgetArgs& args);
int Backup(const Context& ctx, const BackupArgs& args);
int Export(const Context& ctx, const ExportArgs& args);
int Import(const Context& ctx, const ImportArgs& args);
int Ping(const Context& ctx, const PingArgs& args);
int Check(const Context& ctx, const CheckArgs& args);

// Store::Check's report on the store `name` in the table format (check, backup --verify): a
// summary line ending with `note`, then one line a finding.
void PrintCheckTable(const Context& ctx, const std::string& name, const CheckReport& report,
                     std::string_view note);
// Its findings in the JSON Lines format (check, backup --verify --format json): one object each.
void PrintCheckFindingsJson(const Context& ctx, const CheckReport& report);

}  // namespace idem::cli

#endif  // IDEM_TOOLS_COMMANDS_H_
