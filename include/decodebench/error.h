// One error family for everything a user can act on. Host code throws db::Error with a
// message that names the file, tensor, field or option at fault; main() catches it once,
// prints it as one line on stderr and exits non-zero.
#pragma once

#include <fmt/format.h>

#include <cstdio>
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

// Messages are one line by construction: a line break or another control byte that input
// text brought in (a name, a string field, an error read from a file) is escaped as \xHH
// (a newline as \x0a), never printed raw.
inline std::string one_line_text(const std::string& message) {
  std::string out;
  out.reserve(message.size());
  for (const char ch : message) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += ch;
  }
  return out;
}

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(one_line_text(fmt::format(f, std::forward<Args>(args)...)));
}

template <class... Args>
[[noreturn]] void usage_fail(fmt::format_string<Args...> f, Args&&... args) {
  throw UsageError(one_line_text(fmt::format(f, std::forward<Args>(args)...)));
}

// A warning: one line on stderr, "decodebench: warning: <message>".
inline void warn_line(const std::string& message) {
  std::fputs(("decodebench: warning: " + one_line_text(message) + "\n").c_str(), stderr);
  std::fflush(stderr);
}

template <class... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  warn_line(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace db
