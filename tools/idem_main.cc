// The `idem` command: a thin main over idem::cli::Run (tools/cli.cc).

#include <csignal>
#include <iostream>

#include "cli.h"

int main(int argc, char** argv) {
  // A closed pipe (`idem dump PATH | head`) shows up as a failed write that ends the command
  // quietly instead of a signal that kills it.
  std::signal(SIGPIPE, SIG_IGN);
  std::ios::sync_with_stdio(false);
  const int code = idem::cli::Run(argc, argv, std::cout, std::cerr);
  std::cout.flush();
  return code;
}
