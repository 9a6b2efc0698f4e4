// What makes two runs the same experiment: the config fields that compare matches runs by
// (and --pair-by pairs them across), and their names and values as the tables show them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "decodebench/result.h"

namespace db {

// What makes two runs the same experiment: the config fields below. Not the device: runs
// on different devices are matched and the difference is reported beside the pair.
struct RunKey {
  std::string model;
  std::string scheme;
  int group_size = 0;
  std::string lm_head_scheme;
  std::string kv_cache = "fp16";  // a result from before --kv-cache ran an fp16 cache
  std::string kernel;
  bool graph = false;
  std::string adapter;
  std::string adapter_mode;
  int64_t context = 0;
  int64_t tokens = 0;
  bool sync_per_token = false;
  std::string weights;
  int64_t batch = 1;  // a result from before --batch is batch 1

  bool operator==(const RunKey& o) const;
  bool operator!=(const RunKey& o) const { return !(*this == o); }
  bool operator<(const RunKey& o) const;
};

RunKey run_key(const Result& r);

// The key's fields as (name, value) pairs in the order above; names are the config field
// names, values as the md table shows them (booleans "on"/"off").
std::vector<std::pair<std::string, std::string>> key_fields(const RunKey& k);

// "model=8b-int4 scheme=int4 group_size=128 ...": every field, one line; kv_cache only when
// it is not fp16 and batch only when it is not 1, so that a key of an fp16 cache at batch 1
// reads as it did before --kv-cache and --batch.
std::string to_string(const RunKey& k);

// The key fields by name (those of key_fields), for --pair-by: the value of one, and the key
// with that one blanked, so that runs differing only in it match.
const std::vector<std::string>& key_field_names();
std::string key_value(const RunKey& k, const std::string& field);
RunKey without_field(RunKey k, const std::string& field);

}  // namespace db
