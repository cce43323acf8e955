// Running the `idem` command in-process (idem::cli::Run), for the tests of the command.

#ifndef IDEM_TESTS_CLI_RUN_H_
#define IDEM_TESTS_CLI_RUN_H_

#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli.h"
#include "idem/options.h"

namespace idem_test {

struct CliResult {
  int code = -1;
  std::string out;
  std::string err;
};

// Runs idem::cli::Run with argv = {"idem", args...}, on `clock` (null: the system clock).
inline CliResult RunCliOn(const std::vector<std::string>& args,
                          std::shared_ptr<const idem::Clock> clock) {
  std::vector<std::string> words = {"idem"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  std::ostringstream out;
  std::ostringstream err;
  CliResult result;
  result.code =
      idem::cli::Run(static_cast<int>(words.size()), argv.data(), out, err, std::move(clock));
  result.out = out.str();
  result.err = err.str();
  return result;
}

}  // namespace idem_test

#endif  // IDEM_TESTS_CLI_RUN_H_
