// Input files and JSON documents (see include/decodebench/input.h).
#include "decodebench/input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <utility>
#include <vector>

#include "decodebench/error.h"

namespace db {
namespace {

using nlohmann::json;

std::string errno_text(int e) {
  return std::generic_category().message(e);
}

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

void check_regular(const struct stat& st, const std::string& path, const std::string& what,
                   uint64_t max_bytes) {
  if (!S_ISREG(st.st_mode)) fail("{} {}: is {}, not a regular file", what, path, file_kind(st.st_mode));
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    fail("{} {}: is {} bytes, larger than the {}-byte limit for this kind of file", what, path,
         static_cast<uint64_t>(st.st_size), max_bytes);
}

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Builds the document from nlohmann's SAX events, so that the depth is bounded while
// parsing (not after a recursive structure exists) and every error knows the field the
// parser was in.
class Builder {
 public:
  enum class Kind { none, syntax, number, depth, duplicate, other };

  Builder(json& root, bool unique_keys) : root_(root), unique_keys_(unique_keys) {}

  bool null() { return place(json(nullptr)); }
  bool boolean(bool v) { return place(json(v)); }
  bool number_integer(json::number_integer_t v) { return place(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return place(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return place(json(v)); }
  bool string(json::string_t& v) { return place(json(std::move(v))); }
  bool binary(json::binary_t&) { return stop(Kind::other, "binary values are not JSON"); }

  bool start_object(std::size_t) { return open(json::object(), false); }
  bool start_array(std::size_t) { return open(json::array(), true); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(json::string_t& k) {
    Frame& f = frames_.back();
    f.key = std::move(k);
    f.has_key = true;
    // Without unique_keys a repeated key replaces the earlier value, as Python's json does.
    if (unique_keys_ && stack_.back()->contains(f.key)) return stop(Kind::duplicate, "");
    return true;
  }

  bool parse_error(std::size_t position, const std::string& token, const json::exception& e) {
    // out_of_range.406: a number beyond a double ("1e400"); the rest are syntax errors.
    (void)position;  // nlohmann's message says the line and column
    if (e.id == 406) return stop(Kind::number, printable(token, 40));
    std::string m = e.what();
    if (const size_t p = m.find("] "); m.rfind("[json.exception", 0) == 0 && p != std::string::npos)
      m.erase(0, p + 2);
    return stop(Kind::syntax, printable(m, 300));  // "last read: ..." may quote a whole string
  }

  // The dotted path of the value being parsed: "quant.group_size", "timing.samples_ms[3]",
  // cut to 200 bytes.
  std::string path() const {
    std::string p;
    for (size_t i = 0; i < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      if (f.array) {  // an open child is already in its parent: its index is size - 1
        const size_t n = stack_[i]->size();
        p += fmt::format("[{}]", i + 1 < frames_.size() ? n - 1 : n);
      } else if (f.has_key) {
        if (!p.empty()) p += '.';
        p += printable(f.key, 80);
      }
    }
    return printable(p, 200);
  }

  Kind kind() const { return kind_; }
  const std::string& message() const { return message_; }

 private:
  struct Frame {
    bool array;
    bool has_key = false;
    std::string key;
  };

  bool stop(Kind kind, std::string message) {
    if (kind_ == Kind::none) {
      kind_ = kind;
      message_ = std::move(message);
    }
    return false;
  }

  json* insert(json&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    json& slot = top[frames_.back().key];
    slot = std::move(v);
    return &slot;
  }
  bool place(json&& v) {
    insert(std::move(v));
    return true;
  }
  bool open(json&& container, bool array) {
    if (static_cast<int>(stack_.size()) >= kMaxJsonDepth) return stop(Kind::depth, "");
    json* c = insert(std::move(container));
    stack_.push_back(c);
    frames_.push_back(Frame{array, false, {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    frames_.pop_back();
    return true;
  }

  json& root_;
  std::vector<json*> stack_;  // the open arrays and objects, outermost first
  std::vector<Frame> frames_;
  bool unique_keys_;
  Kind kind_ = Kind::none;
  std::string message_;
};

}  // namespace

std::string printable(std::string_view s, size_t limit) {
  std::string out = one_line_text(std::string(s.substr(0, limit)));
  if (s.size() > limit) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

std::string read_input_file(const std::string& path, const std::string& what, uint64_t max_bytes) {
  // stat first: a FIFO or a device is refused without being opened (opening some devices
  // has effects); the descriptor's own fstat then closes the race with a rename.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail("{} {}: cannot open: {}", what, path, errno_text(errno));
  check_regular(st, path, what, max_bytes);
  const Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)};
  if (f.fd < 0) fail("{} {}: cannot open: {}", what, path, errno_text(errno));
  if (::fstat(f.fd, &st) != 0) fail("{} {}: cannot stat: {}", what, path, errno_text(errno));
  check_regular(st, path, what, max_bytes);

  std::string text;
  text.reserve(static_cast<size_t>(st.st_size));
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("{} {}: cannot read: {}", what, path, errno_text(errno));
    if (n == 0) return text;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > max_bytes)  // it grew while being read
      fail("{} {}: is larger than the {}-byte limit for this kind of file", what, path, max_bytes);
  }
}

json parse_json_document(std::string_view text, const std::string& what, bool unique_keys) {
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    fail(
        "{}: invalid JSON: a NUL byte at byte {} (a JSON text cannot hold one; what follows would be "
        "ignored)",
        what, nul);
  json root;
  Builder b(root, unique_keys);
  if (json::sax_parse(text.data(), text.data() + text.size(), &b, json::input_format_t::json, true))
    return root;
  const std::string field = b.path();
  const std::string in_field = field.empty() ? "" : " (in field " + field + ")";
  switch (b.kind()) {
    case Builder::Kind::number:
      fail("{}: {}the number {} is out of range (JSON numbers here must fit a 64-bit float)", what,
           field.empty() ? "" : "field " + field + ": ", b.message());
    case Builder::Kind::depth:
      fail("{}: JSON nested deeper than {} levels{} (no file decodebench reads nests more than a few)", what,
           kMaxJsonDepth, in_field);
    case Builder::Kind::duplicate:
      fail("{}: field {} appears twice in one object (which one counts would be a guess)", what, field);
    default:
      fail("{}: invalid JSON: {}{}", what, b.message(), in_field);
  }
}

}  // namespace db
