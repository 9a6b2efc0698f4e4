// Atomic output files and whole-line appends (see include/decodebench/output_file.h).
#include "decodebench/output_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <utility>

#include "decodebench/error.h"
#include "decodebench/host_memory.h"
#include "decodebench/input.h"

namespace db {
namespace {

namespace fs = std::filesystem;

std::string errno_text(int e) {
  return std::strerror(e);
}

// The process's umask, for the permissions a fallback temporary file gets (mkstemp makes
// 0600; a result file should get what fopen would give it).
mode_t current_umask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Umask:", 0) == 0) return static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8));
  const mode_t m = ::umask(022);  // no /proc: read it by setting it, and put it back
  ::umask(m);
  return m;
}

// Six random letters and digits for a temporary name: distinct between processes and
// between the writers of one process.
std::string random_suffix() {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  static thread_local std::mt19937_64 rng(
      std::random_device{}() ^ static_cast<uint64_t>(::getpid()) << 32 ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::string s(6, 'x');
  for (char& c : s) c = kChars[rng() % (sizeof kChars - 1)];
  return s;
}

// ".NAME.XXXXXX.tmp" in `dir`, NAME cut so that the whole stays within the directory's
// name limit (the target's own name may use all of it).
std::string temp_name(const std::string& dir, const std::string& name, size_t name_max,
                      const std::string& suffix) {
  const size_t keep = name_max > 12 ? std::min(name.size(), name_max - 12) : 0;
  return (fs::path(dir) / ("." + name.substr(0, keep) + "." + suffix + ".tmp")).string();
}

size_t name_max_of(const std::string& dir) {
  const long n = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  return n > 0 ? static_cast<size_t>(n) : 255;
}

// Blocks the interrupts a user sends (Ctrl-C, kill, a closed terminal) while it lives, so
// that one write completes: the signal is taken right after. In a process with other
// threads the kernel may deliver it to one of them; then a torn line is still possible,
// and the readers and JsonlAppender handle one.
class SignalsHeld {
 public:
  SignalsHeld() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&set, sig);
    held_ = pthread_sigmask(SIG_BLOCK, &set, &old_) == 0;
  }
  ~SignalsHeld() {
    if (held_) pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t old_;
  bool held_ = false;
};

// write(2) until all of `n` is out; false with errno set on failure.
bool write_all(int fd, const char* p, size_t n, size_t* done) {
  *done = 0;
  while (*done < n) {
    const ssize_t w = ::write(fd, p + *done, std::min<size_t>(n - *done, size_t{1} << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return false;
    if (w == 0) {
      errno = EIO;
      return false;
    }
    *done += static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------- AtomicFile

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  if (path_.empty()) fail("cannot write: the output path is empty");
  const fs::path p(path_);
  dir_ = p.parent_path().empty() ? "." : p.parent_path().string();
  name_ = p.filename().string();
  struct stat st {};
  if (name_.empty() || name_ == "." || name_ == "..") fail("cannot write {}: {}", path_, errno_text(EISDIR));
  if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) fail("cannot write {}: {}", path_, errno_text(EISDIR));
    fail(
        "cannot write {}: it exists and is not a regular file (the output is renamed into place, which would "
        "replace it)",
        path_);
  }
  const size_t name_max = name_max_of(dir_);
  if (name_.size() > name_max) fail("cannot write {}: {}", path_, errno_text(ENAMETOOLONG));

  // An anonymous file first: nothing to clean up if this process dies before commit().
  fd_ = ::open(dir_.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
  if (fd_ >= 0 && ::access("/proc/self/fd", X_OK) == 0) {
    anonymous_ = true;
    return;
  }
  const int err = errno;
  if (fd_ >= 0) {  // no /proc to link it by: use a named file
    ::close(fd_);
    fd_ = -1;
  } else if (err != EOPNOTSUPP && err != EISDIR && err != EINVAL) {
    fail("cannot write {}: {}", path_, errno_text(err));  // no such directory, no permission, ...
  }
  std::string tmpl = temp_name(dir_, name_, name_max, "XXXXXX");
  fd_ = ::mkostemps(tmpl.data(), 4, O_CLOEXEC);
  if (fd_ < 0) fail("cannot write {}: {}", path_, errno_text(errno));
  tmp_ = tmpl;
  ::fchmod(fd_, 0666 & ~current_umask());
}

AtomicFile::~AtomicFile() {
  if (!done_) discard();
}

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
  done_ = true;
}

void AtomicFile::reserve(uint64_t bytes) {
  if (done_ || fd_ < 0) fail("cannot write {}: the file was already committed or discarded", path_);
  if (bytes == 0) return;
  const auto refuse = [&](const std::string& why) {
    discard();
    fail("cannot write {}: {}", path_, why);
  };
  struct rlimit fsize {};
  if (::getrlimit(RLIMIT_FSIZE, &fsize) == 0 && fsize.rlim_cur != RLIM_INFINITY && bytes > fsize.rlim_cur)
    refuse(fmt::format("{}: it needs {}, above the file-size limit (ulimit -f) of {}", errno_text(EFBIG),
                       format_bytes(bytes), format_bytes(fsize.rlim_cur)));
  const auto free_space = [&]() -> std::optional<uint64_t> {
    struct statvfs fs {};
    if (::fstatvfs(fd_, &fs) != 0) return std::nullopt;
    return static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  };
  const auto no_room = [&](std::optional<uint64_t> free) {
    std::error_code ec;
    std::string where = fs::absolute(dir_, ec).lexically_normal().string();  // "." -> "/abs/dir/"
    if (ec) where = dir_;
    if (where.size() > 1 && where.back() == '/') where.pop_back();
    refuse(fmt::format("{}: it needs {}, {} free on the filesystem of {}", errno_text(ENOSPC),
                       format_bytes(bytes), free ? format_bytes(*free) : "less", where));
  };
  if (bytes > static_cast<uint64_t>(std::numeric_limits<off_t>::max())) refuse(errno_text(EFBIG));
  // The free space first: fallocate of more than there is may take all of it before it
  // fails, and other writers on the filesystem would see it full meanwhile.
  if (const std::optional<uint64_t> free = free_space(); free && bytes > *free) no_room(free);
  if (::fallocate(fd_, 0, 0, static_cast<off_t>(bytes)) == 0) return;
  const int err = errno;
  if (err == ENOSPC || err == EDQUOT) no_room(free_space());
  // A filesystem without fallocate: the free space above is the check there is.
  if (err != EOPNOTSUPP && err != ENOSYS && err != EINVAL) refuse(errno_text(err));
}

void AtomicFile::write(const void* data, size_t n) {
  if (done_ || fd_ < 0) fail("cannot write {}: the file was already committed or discarded", path_);
  size_t done = 0;
  if (!write_all(fd_, static_cast<const char*>(data), n, &done)) {
    const int err = errno;
    discard();
    fail("cannot write {}: {}", path_, errno_text(err));
  }
}

void AtomicFile::commit() {
  if (done_ || fd_ < 0) fail("cannot write {}: the file was already committed or discarded", path_);
  const auto bail = [this](int err) {
    discard();
    fail("cannot write {}: {}", path_, errno_text(err));
  };
  // Data on disk before the new name points at it: a crash leaves the old file or the new.
  if (::fsync(fd_) != 0 && errno != EINVAL) bail(errno);
  if (anonymous_) {
    const std::string proc = "/proc/self/fd/" + std::to_string(fd_);
    const size_t name_max = name_max_of(dir_);
    for (int attempt = 0;; ++attempt) {
      std::string t = temp_name(dir_, name_, name_max, random_suffix());
      if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, t.c_str(), AT_SYMLINK_FOLLOW) == 0) {
        tmp_ = std::move(t);
        break;
      }
      if (errno != EEXIST || attempt == 100) bail(errno);
    }
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) bail(errno);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) bail(errno);
  tmp_.clear();
  done_ = true;
}

bool AtomicFile::commit_new() {
  if (done_ || fd_ < 0) fail("cannot write {}: the file was already committed or discarded", path_);
  const auto bail = [this](int err) {
    discard();
    fail("cannot write {}: {}", path_, errno_text(err));
  };
  if (::fsync(fd_) != 0 && errno != EINVAL) bail(errno);
  // link(2), unlike rename(2), fails on an existing name instead of replacing it.
  const int linked = anonymous_ ? ::linkat(AT_FDCWD, ("/proc/self/fd/" + std::to_string(fd_)).c_str(),
                                           AT_FDCWD, path_.c_str(), AT_SYMLINK_FOLLOW)
                                : ::link(tmp_.c_str(), path_.c_str());
  if (linked != 0) {
    if (errno != EEXIST) bail(errno);
    discard();
    return false;
  }
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
  const int fd = fd_;
  fd_ = -1;
  done_ = true;
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(path_.c_str());
    fail("cannot write {}: {}", path_, errno_text(err));
  }
  return true;
}

void write_file_atomically(const std::string& path, const std::string& text) {
  AtomicFile f(path);
  f.write(text);
  f.commit();
}

// ---------------------------------------------------------------------------- JsonlAppender

JsonlAppender::JsonlAppender(std::string path) : path_(std::move(path)) {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    // Absent: created by the first append, holding that line. Until then there is no file,
    // so a run that fails or is interrupted before its first line leaves none.
    if (path_.empty()) fail("cannot write: the output path is empty");
    const fs::path dir =
        fs::path(path_).parent_path().empty() ? fs::path(".") : fs::path(path_).parent_path();
    if (::access(dir.c_str(), W_OK | X_OK) != 0) fail("cannot write {}: {}", path_, errno_text(errno));
    return;
  }
  open_existing();
}

void JsonlAppender::open_existing() {
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    fail("cannot write {}: it exists and is not a regular file", path_);
  // O_NONBLOCK: a FIFO put there since the stat fails at once (no reader) instead of waiting.
  fd_ = ::open(path_.c_str(), O_RDWR | O_APPEND | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd_ < 0) fail("cannot write {}: {}", path_, errno_text(errno));
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    close();
    fail("cannot write {}: it exists and is not a regular file", path_);
  }
  try {
    repair_torn_tail();
  } catch (...) {
    close();
    throw;
  }
}

JsonlAppender::~JsonlAppender() {
  if (fd_ >= 0) ::close(fd_);
}

void JsonlAppender::repair_torn_tail() {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail("cannot write {}: {}", path_, errno_text(errno));
  const off_t size = st.st_size;
  if (size == 0) return;
  char last = 0;
  if (::pread(fd_, &last, 1, size - 1) != 1) fail("cannot read {}: {}", path_, errno_text(errno));
  if (last == '\n') return;
  // The start of the last line: back from the end, a block at a time.
  off_t line_start = 0;
  std::string tail;
  char buf[65536];
  for (off_t end = size; end > 0 && line_start == 0;) {
    const off_t begin = std::max<off_t>(0, end - static_cast<off_t>(sizeof buf));
    const ssize_t n = ::pread(fd_, buf, static_cast<size_t>(end - begin), begin);
    if (n != end - begin) fail("cannot read {}: {}", path_, errno_text(n < 0 ? errno : EIO));
    const char* nl = static_cast<const char*>(::memrchr(buf, '\n', static_cast<size_t>(n)));
    tail.insert(0, nl ? nl + 1 : buf, nl ? static_cast<size_t>(buf + n - nl - 1) : static_cast<size_t>(n));
    if (nl) line_start = begin + (nl - buf) + 1;
    end = begin;
    if (tail.size() > kMaxResultsFileBytes) break;  // not a line a reader would take anyway
  }
  bool whole = false;
  try {
    whole = tail.size() <= kMaxResultsFileBytes && parse_json_document(tail, path_).is_object();
  } catch (const Error&) {
  }
  if (whole) {  // a complete line that lacks only its newline
    const SignalsHeld held;
    size_t done = 0;
    if (!write_all(fd_, "\n", 1, &done)) fail("cannot write {}: {}", path_, errno_text(errno));
    return;
  }
  // Without a whole line before it, the text may not be a torn line of ours at all: it is
  // the user's to look at, not this writer's to remove.
  if (line_start == 0)
    fail(
        "cannot write {}: it holds no complete line and its text is not JSON (not a jsonl file?); move it "
        "away or write to another file",
        path_);
  if (::ftruncate(fd_, line_start) != 0) fail("cannot write {}: {}", path_, errno_text(errno));
  warn("{}: removed a torn last line ({} bytes without a newline, not valid JSON: an interrupted write)",
       path_, size - line_start);
}

void JsonlAppender::append(const std::string& line) {
  if (closed_) fail("cannot write {}: the file is closed", path_);
  const std::string text = line + "\n";
  if (fd_ < 0) {
    // The first line: written to a file of its own that then takes the name, unless another
    // writer made the file meanwhile (then it is appended to as any existing file).
    {
      const SignalsHeld held;
      AtomicFile first(path_);
      first.write(text);
      if (first.commit_new()) {
        fd_ = ::open(path_.c_str(), O_RDWR | O_APPEND | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        if (fd_ < 0) fail("cannot write {}: {}", path_, errno_text(errno));
        return;
      }
    }
    open_existing();
  }
  const SignalsHeld held;
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail("cannot write {}: {}", path_, errno_text(errno));
  const off_t before = st.st_size;
  size_t done = 0;
  if (write_all(fd_, text.data(), text.size(), &done)) {
    if (::fdatasync(fd_) != 0 && errno != EINVAL) fail("cannot write {}: {}", path_, errno_text(errno));
    return;
  }
  const int err = errno;
  // Cut back what this call wrote, unless another writer has appended since.
  if (done > 0 && ::fstat(fd_, &st) == 0 && st.st_size == before + static_cast<off_t>(done))
    (void)!::ftruncate(fd_, before);
  fail("cannot write {}: {}", path_, errno_text(err));
}

void JsonlAppender::close() {
  closed_ = true;
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot write {}: {}", path_, errno_text(errno));
}

}  // namespace db
