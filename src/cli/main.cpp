// Entry point: every error becomes one line on stderr and an exit code.
//   0 success · 1 the work failed (db::Error or anything unexpected) · 2 bad usage
#include <cstdio>
#include <exception>
#include <string>

#include "cli.h"
#include "decodebench/error.h"

namespace {

// Messages are single lines by contract; fold any stray newline so stderr stays one line.
std::string one_line(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

void report(const std::string& message) {
  std::fprintf(stderr, "decodebench: %s\n", one_line(message).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return db::cli_main(argc, argv);
  } catch (const db::UsageError& e) {
    report(e.what());
    return 2;
  } catch (const db::Error& e) {
    report(e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    report("out of host memory");
    return 1;
  } catch (const std::exception& e) {
    report(std::string("internal error: ") + e.what());
    return 1;
  } catch (...) {
    report("internal error: unknown exception");
    return 1;
  }
}
