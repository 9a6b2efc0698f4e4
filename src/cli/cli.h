// The command-line front end (CLI11): parses argv into the specs of include/decodebench/
// commands.h, validates everything that can be checked before any work starts, and calls
// the verb. Private to the binary; main() catches what it throws.
#pragma once

#include <string>
#include <vector>

namespace db {

// Parses and runs. Returns the exit code: 0, 1 (the verb failed), or 2 (bad usage, already
// reported on stderr as one line). Throws db::UsageError / db::Error for main() to print.
int cli_main(int argc, char** argv);

// POSIX shell quoting of one word / a whole argv, for the result's "command" field.
std::string shell_quote(const std::string& word);
std::string shell_join(const std::vector<std::string>& argv);

}  // namespace db
