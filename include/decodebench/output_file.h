// Writing output files so that a reader never sees a partial one, whatever runs beside us.
//
// AtomicFile: every writer has its own temporary file in the target's directory (an
// anonymous O_TMPFILE where the filesystem has them, else ".NAME.XXXXXX.tmp"), written,
// synced and renamed onto the target. Two writers of one path each rename a whole file, so
// the survivor is one of them, whole; a failed or interrupted writer leaves nothing (the
// anonymous file vanishes with its descriptor). Every result file, report and weights file
// goes through it.
//
// JsonlAppender: a sweep's lines, appended to a file that may already hold lines. Each line
// goes out in one write() (interrupts blocked around it), and a failed write is truncated
// back, so a line is in the file whole or not at all. A file that does not exist yet comes
// into being with its first line (an AtomicFile linked into place): nothing is left where
// no line was written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace db {

class AtomicFile {
 public:
  // Creates the temporary file at once, so that a missing or unwritable directory, a name
  // too long, or a target that exists and is not a regular file (a directory, /dev/null, a
  // FIFO: rename would replace it) fails before any work. Errors: "cannot write PATH: why".
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // discards the temporary file unless commit() ran
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Claims `bytes` of disk for the file before any is written (fallocate, where the
  // filesystem has it): a file that cannot fit fails now, not after minutes of writing, and
  // later writes cannot run out of room. Above the file-size limit (ulimit -f), or more than
  // the filesystem has free: a db::Error "cannot write PATH: ..." with both figures, and the
  // file is discarded.
  void reserve(uint64_t bytes);
  void write(const void* data, size_t n);
  void write(const std::string& text) { write(text.data(), text.size()); }
  // fsync, then rename onto the path. After an error the file is discarded.
  void commit();
  // fsync, then give the file the path's name only if nothing has it: false (the file
  // discarded) when the path exists. After an error the file is discarded.
  bool commit_new();
  void discard() noexcept;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string dir_;
  std::string name_;
  std::string tmp_;  // the temporary's name once it has one (the fallback, or linked at commit)
  int fd_ = -1;
  bool anonymous_ = false;  // O_TMPFILE: no name until commit()
  bool done_ = false;
};

// The whole of `text` to `path` through an AtomicFile.
void write_file_atomically(const std::string& path, const std::string& text);

class JsonlAppender {
 public:
  // Opens `path` for appending when it exists; otherwise checks that its directory is
  // writable and leaves the creation to the first append. A last line left torn by an
  // interrupted writer (no newline, not valid JSON) after whole lines is truncated away
  // with a warning, so that the next line does not glue onto it; a file that is only such
  // text is refused; a last line that is whole JSON without its newline gets one.
  explicit JsonlAppender(std::string path);
  ~JsonlAppender();
  JsonlAppender(const JsonlAppender&) = delete;
  JsonlAppender& operator=(const JsonlAppender&) = delete;

  // `line` (no newline in it) and a newline, in one write; on failure the file is cut back
  // to its size before, and a db::Error "cannot write PATH: why" is thrown.
  void append(const std::string& line);
  void close();

 private:
  void open_existing();
  void repair_torn_tail();
  std::string path_;
  int fd_ = -1;  // -1 before the first line of a file that did not exist, and after close()
  bool closed_ = false;
};

}  // namespace db
