// safetensors I/O. The reader maps the file and validates the whole header up front, so
// hostile input (truncation, offsets out of range or overlapping, unknown dtypes, byte
// counts that overflow, a header that is not a JSON object) is a db::Error at open time,
// never undefined behaviour later; so are the reference implementation's rules (the header
// starts with '{', the tensors tile the data section without overlap, hole or tail). The
// writer writes a temporary file of its own (output_file.h AtomicFile) and renames it on
// finish(), so an interrupted or concurrent write never leaves a half-written file under the
// real name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace db {

class AtomicFile;

enum class DType { f64, f32, f16, bf16, i64, i32, i16, i8, u8, boolean, f8_e4m3 };

const char* to_string(DType d);  // the safetensors spelling: "F32", "BF16", "U8", ...
size_t dtype_size(DType d);
std::string shape_string(const std::vector<int64_t>& shape);  // "[14336, 4096]"

struct TensorInfo {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the mapping; valid while the file object lives
  int64_t elements() const;
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const;
  const TensorInfo* find(const std::string& name) const;  // nullptr when absent
  // Errors name the file and tensor: "weights file X: no tensor named Y", or
  // "weights file X: tensor Y has dtype F32, expected F16" / "has shape [..], expected [..]".
  const TensorInfo& get(const std::string& name) const;
  const TensorInfo& get(const std::string& name, DType dtype, const std::vector<int64_t>& shape) const;
  std::vector<std::string> names() const;  // sorted
  const std::map<std::string, std::string>& metadata() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A checkpoint: a single .safetensors file, an HF sharded index
// (model.safetensors.index.json), or a directory holding either. Lookups go to the shard
// that the index names; every shard named by the index must exist and hold its tensors.
class Checkpoint {
 public:
  explicit Checkpoint(const std::string& path);
  ~Checkpoint();
  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;

  const std::string& path() const;
  const TensorInfo* find(const std::string& name) const;
  const TensorInfo& get(const std::string& name) const;
  const TensorInfo& get(const std::string& name, DType dtype, const std::vector<int64_t>& shape) const;
  std::vector<std::string> names() const;
  // __metadata__ of the single file, or of the first shard.
  const std::map<std::string, std::string>& metadata() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class SafetensorsWriter {
 public:
  // Creates the temporary file at once, so an output directory that does not exist is an
  // error before the caller spends minutes producing tensors.
  explicit SafetensorsWriter(std::string path);
  ~SafetensorsWriter();  // removes the temp file when finish() was not reached
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  void set_metadata(const std::string& key, const std::string& value);
  // `data` must stay valid until finish().
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data);
  // `fill` writes the tensor's bytes into a buffer of its size when finish() streams it,
  // so a large model needs host memory for one tensor at a time.
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape,
           std::function<void(uint8_t* out)> fill);
  // `produce` hands the tensor's bytes, in order and in pieces of any size, to the sink it is
  // given when finish() streams it: host memory holds a piece, not the tensor. Exactly the
  // tensor's byte count must come out.
  using Sink = std::function<void(const void* data, size_t n)>;
  void add_streamed(const std::string& name, DType dtype, std::vector<int64_t> shape,
                    std::function<void(const Sink&)> produce);
  // Writes the header, then every tensor in the order added. The whole file's size is
  // reserved on the disk first (output_file.h AtomicFile::reserve): a file that cannot fit,
  // or is above the file-size limit, fails before any tensor is produced.
  void finish();

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t nbytes;
    const void* data;
    std::function<void(uint8_t*)> fill;
    std::function<void(const Sink&)> produce;
  };
  void add_entry(Entry entry);
  void discard() noexcept;  // drops the temporary file, if this writer still has one

  std::string path_;
  std::unique_ptr<AtomicFile> file_;  // opened in the constructor so a bad path fails early
  std::map<std::string, std::string> metadata_;
  std::vector<Entry> entries_;
  bool finished_ = false;
};

}  // namespace db
