// safetensors reader (mmap + full header validation), sharded checkpoints, and an atomic
// writer. Layout: 8-byte little-endian header length N, N bytes of JSON header, then the
// data section; each tensor's data_offsets are relative to the start of the data section.
#include "decodebench/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <limits>
#include <system_error>
#include <tuple>
#include <utility>

#include "decodebench/error.h"
#include "decodebench/input.h"
#include "decodebench/output_file.h"

namespace db {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The reference implementation (huggingface/safetensors) refuses headers above 100 MB; a
// real header for a 70B model with its ~700 tensors is under 100 KB.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::f64, "F64", 8},      {DType::f32, "F32", 4},         {DType::f16, "F16", 2},
    {DType::bf16, "BF16", 2},    {DType::i64, "I64", 8},         {DType::i32, "I32", 4},
    {DType::i16, "I16", 2},      {DType::i8, "I8", 1},           {DType::u8, "U8", 1},
    {DType::boolean, "BOOL", 1}, {DType::f8_e4m3, "F8_E4M3", 1},
};

// The names kDTypes reads, for the message that refuses any other.
std::string known_dtypes() {
  std::string names;
  for (const DTypeInfo& d : kDTypes) names += (names.empty() ? "" : ", ") + std::string(d.name);
  return names;
}

const DTypeInfo& dtype_info(DType d) {
  for (const auto& t : kDTypes)
    if (t.dtype == d) return t;
  fail("internal error: DType value {} is not in the dtype table", static_cast<int>(d));
}

const DTypeInfo* dtype_by_name(const std::string& s) {
  for (const auto& t : kDTypes)
    if (s == t.name) return &t;
  return nullptr;
}

std::string errno_text(int e) {
  return std::generic_category().message(e);
}

// Names from a hostile header go into one-line messages: escaped and cut (a name may be
// 100 MB long).
std::string quote_name(const std::string& name) {
  return "'" + printable(name) + "'";
}

// A JSON integer that fits in uint64; false for negatives, fractions and non-numbers.
bool as_u64(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {  // "-0" parses as a signed integer
    *out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

// Closes the descriptor on every path out, including the throwing ones.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

const char* to_string(DType d) {
  return dtype_info(d).name;
}
size_t dtype_size(DType d) {
  return dtype_info(d).size;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t TensorInfo::elements() const {
  // Order-independent: a zero anywhere makes the tensor empty, whatever the other dims are.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      fail("tensor {}: shape {} has no valid element count", name, shape_string(shape));
  return n;
}

// ---------------------------------------------------------------------------------------
// SafetensorsFile

struct SafetensorsFile::Impl {
  std::string path;
  void* map = MAP_FAILED;
  size_t map_size = 0;
  std::map<std::string, TensorInfo> tensors;  // sorted: names() and lookups
  std::map<std::string, std::string> metadata;

  ~Impl() {
    if (map != MAP_FAILED) ::munmap(map, map_size);
  }

  template <class... Args>
  [[noreturn]] void bad(fmt::format_string<Args...> f, Args&&... args) const {
    fail("weights file {}: {}", path, fmt::format(f, std::forward<Args>(args)...));
  }

  void open();
  void parse_header(const char* text, uint64_t header_len, const uint8_t* data, uint64_t data_size);
  TensorInfo parse_tensor(const std::string& name, const json& v, uint64_t data_size, uint64_t* begin);
  void parse_metadata(const json& v);
};

void SafetensorsFile::Impl::open() {
  // Only a regular file is opened: a FIFO would block the open (a writer) or the reads, a
  // device may have effects when opened. O_NONBLOCK and the fstat cover a swap in between.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) bad("cannot open: {}", errno_text(errno));
  if (S_ISDIR(st.st_mode)) bad("is a directory, expected a .safetensors file");
  if (!S_ISREG(st.st_mode)) bad("is not a regular file");
  const Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)};
  if (f.fd < 0) bad("cannot open: {}", errno_text(errno));
  if (::fstat(f.fd, &st) != 0) bad("cannot stat: {}", errno_text(errno));
  if (!S_ISREG(st.st_mode)) bad("is not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8)
    bad("file is {} bytes, shorter than the 8-byte header length: truncated or not a safetensors file", size);
  map_size = static_cast<size_t>(size);
  map = ::mmap(nullptr, map_size, PROT_READ, MAP_PRIVATE, f.fd, 0);  // stays valid after close
  if (map == MAP_FAILED) bad("cannot map {} bytes: {}", size, errno_text(errno));

  const auto* bytes = static_cast<const uint8_t*>(map);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > size - 8)
    bad("header length {} is past the end of the file ({} bytes after the length field): truncated or "
        "not a safetensors file",
        header_len, size - 8);
  if (header_len > kMaxHeaderBytes)
    bad("header length {} is larger than the {}-byte limit", header_len, kMaxHeaderBytes);
  parse_header(reinterpret_cast<const char*>(bytes + 8), header_len, bytes + 8 + header_len,
               size - 8 - header_len);
}

void SafetensorsFile::Impl::parse_header(const char* text, uint64_t header_len, const uint8_t* data,
                                         uint64_t data_size) {
  // As the reference implementation: the header is one JSON object from its first byte, then
  // at most whitespace padding. A NUL byte (where a lenient parser would stop, ignoring
  // whatever follows), deep nesting and numbers out of range are refused by
  // parse_json_document; so is a name given twice (which tensor is meant would be a guess).
  if (header_len == 0 || text[0] != '{')
    bad("header does not start with '{{' (not a safetensors file, or a corrupt header length)");
  const json header = parse_json_document(std::string_view(text, header_len),
                                          fmt::format("weights file {}: header", path), /*unique_keys=*/true);
  if (!header.is_object()) bad("header is a JSON {}, expected an object", header.type_name());

  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      parse_metadata(it.value());
      continue;
    }
    uint64_t begin = 0;
    TensorInfo t = parse_tensor(it.key(), it.value(), data_size, &begin);
    t.data = data + begin;
    auto& stored = tensors.emplace(it.key(), std::move(t)).first->second;
    spans.push_back({begin, begin + stored.nbytes, &stored.name});
  }
  // The tensors must tile the data section exactly, in order of their offsets: no two share
  // a byte, no byte is left between them or after the last (the reference implementation's
  // rule; a hole or a tail means a wrong offset or a header length that is off).
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  uint64_t at = 0;
  const Span* prev = nullptr;
  for (const Span& sp : spans) {
    if (sp.begin < at)
      bad("tensors {} data_offsets [{}, {}] and {} data_offsets [{}, {}] overlap", quote_name(*prev->name),
          prev->begin, prev->end, quote_name(*sp.name), sp.begin, sp.end);
    if (sp.begin > at)
      bad("tensor {} data_offsets [{}, {}] leave bytes [{}, {}) of the data section unused (the tensors must "
          "cover it without holes)",
          quote_name(*sp.name), sp.begin, sp.end, at, sp.begin);
    at = sp.end;
    prev = &sp;
  }
  if (at != data_size)
    bad("the tensors end at byte {} of the data section, which holds {} bytes (trailing bytes: a wrong "
        "header "
        "length or a truncated tensor list)",
        at, data_size);
}

TensorInfo SafetensorsFile::Impl::parse_tensor(const std::string& name, const json& v, uint64_t data_size,
                                               uint64_t* begin_out) {
  const std::string q = quote_name(name);
  if (!v.is_object())
    bad("tensor {} is a JSON {}, expected an object with dtype, shape and data_offsets", q, v.type_name());
  TensorInfo t;
  t.name = name;

  const auto dt = v.find("dtype");
  if (dt == v.end()) bad("tensor {} has no dtype", q);
  if (!dt->is_string())
    bad("tensor {} dtype is a JSON {}, expected a string such as \"F16\"", q, dt->type_name());
  const DTypeInfo* info = dtype_by_name(dt->get_ref<const std::string&>());
  if (!info)
    bad("tensor {} has unknown dtype {} (known: {})", q, quote_name(dt->get_ref<const std::string&>()),
        known_dtypes());
  t.dtype = info->dtype;

  const auto sh = v.find("shape");
  if (sh == v.end()) bad("tensor {} has no shape", q);
  if (!sh->is_array()) bad("tensor {} shape is a JSON {}, expected an array of integers", q, sh->type_name());
  bool empty = false;
  // Signed 64-bit so that any product of the dimensions also fits the int64 arithmetic that
  // code downstream does on shapes.
  int64_t bytes = static_cast<int64_t>(info->size);
  bool overflow = false;
  for (size_t i = 0; i < sh->size(); ++i) {
    const json& d = (*sh)[i];
    if (d.is_number_integer() && !d.is_number_unsigned() && d.get<int64_t>() < 0)
      bad("tensor {} has a negative dimension {} in its shape (element {})", q, d.get<int64_t>(), i);
    uint64_t u = 0;
    if (!as_u64(d, &u))
      bad("tensor {} shape element {} is a JSON {}, expected a non-negative integer", q, i, d.type_name());
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      bad("tensor {} shape element {} ({}) overflows a 64-bit dimension", q, i, u);
    const auto dim = static_cast<int64_t>(u);
    t.shape.push_back(dim);
    if (dim == 0)
      empty = true;
    else
      overflow = overflow || __builtin_mul_overflow(bytes, dim, &bytes);
  }
  if (overflow)
    bad("tensor {} shape {} with dtype {} has a byte count that overflows 64-bit integers", q,
        shape_string(t.shape), info->name);
  t.nbytes = empty ? 0 : static_cast<uint64_t>(bytes);

  const auto off = v.find("data_offsets");
  if (off == v.end()) bad("tensor {} has no data_offsets", q);
  uint64_t begin = 0, end = 0;
  if (!off->is_array() || off->size() != 2 || !as_u64((*off)[0], &begin) || !as_u64((*off)[1], &end))
    bad("tensor {} data_offsets must be [begin, end] with non-negative integers", q);
  if (begin > end) bad("tensor {} data_offsets [{}, {}] end before they begin", q, begin, end);
  if (end - begin != t.nbytes)
    bad("tensor {} shape {} with dtype {} needs {} bytes, but its data_offsets [{}, {}] hold {}", q,
        shape_string(t.shape), info->name, t.nbytes, begin, end, end - begin);
  if (end > data_size)
    bad("tensor {} data_offsets [{}, {}] exceed the data section ({} bytes)", q, begin, end, data_size);
  *begin_out = begin;
  return t;
}

void SafetensorsFile::Impl::parse_metadata(const json& v) {
  if (!v.is_object()) bad("__metadata__ is a JSON {}, expected an object of strings", v.type_name());
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_string())
      bad("__metadata__ value for {} is a JSON {}, expected a string", quote_name(it.key()),
          it.value().type_name());
    metadata.emplace(it.key(), it.value().get<std::string>());
  }
}

SafetensorsFile::SafetensorsFile(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->open();
}
SafetensorsFile::~SafetensorsFile() = default;
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;

const std::string& SafetensorsFile::path() const {
  return impl_->path;
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  const auto it = impl_->tensors.find(name);
  return it == impl_->tensors.end() ? nullptr : &it->second;
}

const TensorInfo& SafetensorsFile::get(const std::string& name) const {
  const TensorInfo* t = find(name);
  if (!t) fail("weights file {}: no tensor named {}", impl_->path, name);
  return *t;
}

const TensorInfo& SafetensorsFile::get(const std::string& name, DType dtype,
                                       const std::vector<int64_t>& shape) const {
  const TensorInfo& t = get(name);
  if (t.dtype != dtype)
    fail("weights file {}: tensor {} has dtype {}, expected {}", impl_->path, name, to_string(t.dtype),
         to_string(dtype));
  if (t.shape != shape)
    fail("weights file {}: tensor {} has shape {}, expected {}", impl_->path, name, shape_string(t.shape),
         shape_string(shape));
  return t;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(impl_->tensors.size());
  for (const auto& kv : impl_->tensors) out.push_back(kv.first);
  return out;
}

const std::map<std::string, std::string>& SafetensorsFile::metadata() const {
  return impl_->metadata;
}

// ---------------------------------------------------------------------------------------
// Checkpoint

struct Checkpoint::Impl {
  std::string path;
  std::string index_path;               // empty for a single file
  std::vector<SafetensorsFile> shards;  // in file-name order; shards[0] supplies metadata()
  std::map<std::string, std::pair<size_t, const TensorInfo*>> tensors;

  void load_index();
};

void Checkpoint::Impl::load_index() {
  const std::string label = "weights index " + index_path;
  const json index =
      parse_json_document(read_input_file(index_path, "weights index", kMaxIndexFileBytes), label);
  if (!index.is_object()) fail("{}: is a JSON {}, expected an object", label, index.type_name());
  const auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object())
    fail("{}: has no \"weight_map\" object (tensor name -> shard file)", label);

  // Open each shard once, in name order; the index's order of tensors is arbitrary.
  std::map<std::string, std::vector<std::string>> by_shard;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    // A shard is a file beside the index, as HF writes them: not a path elsewhere.
    const auto& v = it.value();
    if (!v.is_string() || v.get_ref<const std::string&>().empty() ||
        v.get_ref<const std::string&>().find('/') != std::string::npos || v == "." || v == "..")
      fail("{}: weight_map entry for {} is not a shard file name", label, quote_name(it.key()));
    by_shard[it.value().get<std::string>()].push_back(it.key());
  }
  const fs::path dir = fs::path(index_path).parent_path();
  for (const auto& [shard, names] : by_shard) {
    const std::string shard_path = (dir / shard).string();
    std::error_code ec;
    if (!fs::exists(shard_path, ec))
      fail("{}: shard {} (named for {} tensors, e.g. {}) does not exist at {}", label, quote_name(shard),
           names.size(), quote_name(names.front()), shard_path);
    shards.emplace_back(shard_path);  // errors inside the shard name the shard's path
    const SafetensorsFile& file = shards.back();
    for (const auto& name : names) {
      const TensorInfo* t = file.find(name);
      if (!t)
        fail("{}: tensor {} is mapped to shard {}, which does not contain it", label, quote_name(name),
             quote_name(shard));
      tensors.emplace(name, std::make_pair(shards.size() - 1, t));
    }
  }
}

Checkpoint::Checkpoint(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  std::error_code ec;
  std::string single;
  if (fs::is_directory(path, ec)) {
    const fs::path index = fs::path(path) / "model.safetensors.index.json";
    const fs::path file = fs::path(path) / "model.safetensors";
    if (fs::exists(index, ec))
      impl_->index_path = index.string();
    else if (fs::exists(file, ec))
      single = file.string();
    else
      fail("weights directory {}: holds neither model.safetensors.index.json nor model.safetensors", path);
  } else if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    impl_->index_path = path;
  } else {
    single = path;
  }

  if (impl_->index_path.empty()) {
    impl_->shards.emplace_back(single);
    const SafetensorsFile& file = impl_->shards.back();
    for (const auto& name : file.names())
      impl_->tensors.emplace(name, std::make_pair(size_t{0}, file.find(name)));
  } else {
    impl_->load_index();
  }
}
Checkpoint::~Checkpoint() = default;
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;

const std::string& Checkpoint::path() const {
  return impl_->path;
}

const TensorInfo* Checkpoint::find(const std::string& name) const {
  const auto it = impl_->tensors.find(name);
  return it == impl_->tensors.end() ? nullptr : it->second.second;
}

const TensorInfo& Checkpoint::get(const std::string& name) const {
  const auto it = impl_->tensors.find(name);
  if (it != impl_->tensors.end()) return *it->second.second;
  if (impl_->index_path.empty()) return impl_->shards.front().get(name);  // throws, naming the file
  fail("weights index {}: no tensor named {}", impl_->index_path, name);
}

const TensorInfo& Checkpoint::get(const std::string& name, DType dtype,
                                  const std::vector<int64_t>& shape) const {
  get(name);  // a missing name is reported against the index, not a guessed shard
  // The shard's get() names the shard file, which is where the mismatching bytes are.
  return impl_->shards[impl_->tensors.at(name).first].get(name, dtype, shape);
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(impl_->tensors.size());
  for (const auto& kv : impl_->tensors) out.push_back(kv.first);
  return out;
}

const std::map<std::string, std::string>& Checkpoint::metadata() const {
  static const std::map<std::string, std::string> kNone;  // an index with an empty weight_map
  return impl_->shards.empty() ? kNone : impl_->shards.front().metadata();
}

// ---------------------------------------------------------------------------------------
// SafetensorsWriter

SafetensorsWriter::SafetensorsWriter(std::string path)
    : path_(std::move(path)), file_(std::make_unique<AtomicFile>(path_)) {}

SafetensorsWriter::~SafetensorsWriter() {
  discard();
}

void SafetensorsWriter::discard() noexcept {
  if (file_) file_->discard();
  file_.reset();
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  if (finished_ || !file_) fail("cannot write {}: set_metadata after finish() or a failed write", path_);
  metadata_[key] = value;
}

void SafetensorsWriter::add_entry(Entry e) {
  if (finished_ || !file_)
    fail("cannot write {}: tensor {} added after finish() or a failed write", path_, e.name);
  if (e.name == "__metadata__")
    fail("cannot write {}: \"__metadata__\" is reserved, not a tensor name", path_);
  for (const auto& other : entries_)
    if (other.name == e.name) fail("cannot write {}: tensor {} added twice", path_, e.name);
  int64_t bytes = static_cast<int64_t>(dtype_size(e.dtype));
  bool empty = false;
  for (int64_t d : e.shape) {
    if (d < 0)
      fail("cannot write {}: tensor {} has a negative dimension in {}", path_, e.name, shape_string(e.shape));
    if (d == 0) empty = true;
    if (d != 0 && __builtin_mul_overflow(bytes, d, &bytes))
      fail("cannot write {}: tensor {} shape {} overflows 64-bit byte counts", path_, e.name,
           shape_string(e.shape));
  }
  e.nbytes = empty ? 0 : static_cast<uint64_t>(bytes);
  if (e.nbytes > 0 && !e.data && !e.fill && !e.produce)
    fail("cannot write {}: tensor {} has no data", path_, e.name);
  entries_.push_back(std::move(e));
}

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            const void* data) {
  add_entry({name, dtype, std::move(shape), 0, data, nullptr, nullptr});
}

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            std::function<void(uint8_t* out)> fill) {
  if (!fill) fail("cannot write {}: tensor {} has an empty fill function", path_, name);
  add_entry({name, dtype, std::move(shape), 0, nullptr, std::move(fill), nullptr});
}

void SafetensorsWriter::add_streamed(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                     std::function<void(const Sink&)> produce) {
  if (!produce) fail("cannot write {}: tensor {} has an empty producer", path_, name);
  add_entry({name, dtype, std::move(shape), 0, nullptr, nullptr, std::move(produce)});
}

void SafetensorsWriter::finish() {
  if (finished_) fail("cannot write {}: finish() called twice", path_);
  if (!file_) fail("cannot write {}: an earlier error abandoned this file", path_);
  const auto write_all = [this](const void* p, uint64_t n) { file_->write(p, static_cast<size_t>(n)); };
  try {
    // ordered_json keeps the entries in the order added, "__metadata__" first.
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata_.empty()) {
      auto& m = header["__metadata__"];
      m = nlohmann::ordered_json::object();
      for (const auto& [k, v] : metadata_) m[k] = v;
    }
    uint64_t offset = 0;
    for (const auto& e : entries_) {
      auto& h = header[e.name];
      h["dtype"] = to_string(e.dtype);
      h["shape"] = e.shape;
      h["data_offsets"] = {offset, offset + e.nbytes};
      offset += e.nbytes;
    }
    std::string text;
    try {
      text = header.dump();
    } catch (const nlohmann::json::exception& e) {  // e.g. a name that is not valid UTF-8
      fail("cannot write {}: {}", path_, e.what());
    }
    // Pad with spaces (valid JSON whitespace) so the data section starts 8-byte aligned.
    text.append((8 - text.size() % 8) % 8, ' ');
    file_->reserve(8 + text.size() + offset);
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
    write_all(len, 8);
    write_all(text.data(), text.size());

    std::vector<uint8_t> buf;  // a fill: one tensor at a time, host memory is the largest such tensor
    for (const auto& e : entries_) {
      if (e.nbytes == 0) continue;
      if (e.produce) {
        uint64_t produced = 0;
        e.produce([&](const void* p, size_t n) {
          if (n > e.nbytes - produced)
            fail("cannot write {}: tensor {} produced more than its {} bytes", path_, e.name, e.nbytes);
          write_all(p, n);
          produced += n;
        });
        if (produced != e.nbytes)
          fail("cannot write {}: tensor {} produced {} of its {} bytes", path_, e.name, produced, e.nbytes);
      } else if (e.fill) {
        buf.assign(e.nbytes, 0);
        e.fill(buf.data());
        write_all(buf.data(), e.nbytes);
      } else {
        write_all(e.data, e.nbytes);
      }
    }
    file_->commit();  // synced, then renamed: a crash leaves the old file or the whole new one
    file_.reset();
    finished_ = true;
  } catch (...) {
    discard();
    throw;
  }
}

}  // namespace db
