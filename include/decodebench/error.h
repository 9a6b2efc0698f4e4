// One error family for everything a user can act on. Host code throws db::Error with a
// message that names the file, tensor, field or option at fault; main() catches it once,
// prints it as one line on stderr and exits non-zero.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace db {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad command-line usage: main() maps it to exit code 2 (as CLI11 does for parse errors).
class UsageError : public Error {
 public:
  using Error::Error;
};

// " (did you mean NAME?)" for the name in `names` closest to `word` when it is close enough
// to be a typo of it; "" otherwise. For messages about unknown options, presets and kernels.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& names);

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

template <class... Args>
[[noreturn]] void usage_fail(fmt::format_string<Args...> f, Args&&... args) {
  throw UsageError(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace db
