// Reading what a user hands us: one place that opens input files and parses JSON, so that
// hostile input (a FIFO, /dev/zero, a file of a few GB, a document nested 100,000 deep, a
// number out of range, a NUL byte followed by anything) is one db::Error naming the file
// and, where known, the field, never a hang, a crash or an internal error.
// docs/input-safety.md lists the limits and why each is where it is.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace db {

// Size bounds of the inputs read whole into memory, each far above any real file of its
// kind (a 70B HF config.json is 1 KB, a result line 10-20 KB, a sharded index 30 KB).
inline constexpr uint64_t kMaxConfigFileBytes = uint64_t{16} << 20;  // configs, adapter_config.json
inline constexpr uint64_t kMaxResultsFileBytes = uint64_t{1} << 30;  // result files (json, jsonl)
inline constexpr uint64_t kMaxIndexFileBytes = 100'000'000;          // as safetensors' header limit

// No file decodebench reads nests deeper than 5 levels; nlohmann's dump, copy and
// comparison recurse once per level, so an unbounded depth is a stack overflow.
inline constexpr int kMaxJsonDepth = 64;

// The whole content of the input file at `path`. Only a regular file (after symlinks) is
// read: a directory, FIFO, socket or device is refused before it is opened, so nothing
// blocks. A file larger than `max_bytes` is refused. Errors: "{what} {path}: ...".
std::string read_input_file(const std::string& path, const std::string& what, uint64_t max_bytes);

// One JSON document, strictly: at most kMaxJsonDepth levels of nesting, no NUL byte (the
// parser would stop there and ignore what follows), nothing but whitespace after the
// value, every number within a double's range. A key repeated in one object replaces the
// earlier value, as Python's json (which writes and reads HF and PEFT configs) does; with
// `unique_keys` it is refused. Any problem is a db::Error "{what}: ..." naming the line and
// column and, where the parser was inside one, the field by its dotted path
// ("quant.group_size", "timing.samples_ms[3]").
nlohmann::json parse_json_document(std::string_view text, const std::string& what, bool unique_keys = false);

// Text from an input, fit for a one-line message: control bytes escaped (\n, \xHH),
// cut after `limit` bytes with the full length said.
std::string printable(std::string_view s, size_t limit = 160);

}  // namespace db
