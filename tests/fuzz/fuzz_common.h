// Shared by the libFuzzer targets (tests/fuzz/fuzz_*.cpp): a scratch directory, files
// written into it, and the micro model the targets load. A target catches db::Error, the
// one exception hostile input may end in; anything else escapes and libFuzzer reports it
// (as it reports a crash, a sanitizer finding, a timeout or a runaway allocation).
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "decodebench/config.h"

namespace db_fuzz {

// A directory of this process's own, made once (libFuzzer runs one input at a time), in
// memory where there is a tmpfs: ext4 writes back a file truncated and rewritten when it
// is closed, which made every input cost a disk flush.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::string tmpl =
        (::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + std::string("/decodebench_fuzz_XXXXXX");
    if (!mkdtemp(tmpl.data())) std::abort();
    // Removed at exit from a copy without a destructor (the string may be gone by then).
    static char removed_at_exit[64];
    tmpl.copy(removed_at_exit, sizeof removed_at_exit - 1);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(removed_at_exit, ec);
    });
    return tmpl;
  }();
  return dir;
}

// Replaces dir/name with `size` bytes; returns the path.
inline std::string write_file(const std::string& name, const void* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  const char* p = static_cast<const char*>(data);
  for (size_t done = 0; done < size;) {
    const ssize_t w = ::write(fd, p + done, size - done);
    if (w <= 0) std::abort();
    done += static_cast<size_t>(w);
  }
  ::close(fd);
  return path;
}

inline std::string write_file(const std::string& name, const std::string& text) {
  return write_file(name, text.data(), text.size());
}

// tests/fuzz/micro.json: 1 layer, hidden 16, GQA 2:1, intermediate 32, vocab 32.
inline const db::ModelConfig& micro_config() {
  static const db::ModelConfig c = db::load_model_config(DB_FUZZ_DIR "/micro.json");
  return c;
}

}  // namespace db_fuzz
