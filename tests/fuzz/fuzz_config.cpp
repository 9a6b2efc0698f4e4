// libFuzzer target: a model config, with "extends". The input is the config file; the part
// after a line "#base" (when there is one) is written beside it as base.json, so that a
// config may extend a file as well as a preset (and the two may extend each other). What
// loads must give shapes, a parameter count, RoPE tables and byte accounting without
// overflow, and survive the command line's overrides.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "decodebench/accounting.h"
#include "decodebench/error.h"
#include "decodebench/model.h"
#include "decodebench/rope.h"
#include "decodebench/run_spec.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string marker = "\n#base\n";
  const size_t split = text.find(marker);
  db_fuzz::write_file("base.json", split == std::string::npos ? "{}" : text.substr(split + marker.size()));
  const std::string path = db_fuzz::write_file("model.json", text.substr(0, split));
  try {
    const db::ModelConfig c = db::load_model_config(path);
    (void)db::parameter_count(c);
    for (db::Linear l : db::kLinears) (void)db::linear_shape(c, l).elements();
    (void)db::rope_inv_freq(c);
    (void)db::rope_table(c, std::min<int64_t>(c.max_position_embeddings, 4));
    (void)db::account_bytes(c, db::AdapterShape{}, db::KernelTraffic{}, 0, c.max_position_embeddings - 1);
    for (db::Scheme s : {db::Scheme::fp16, db::Scheme::int8, db::Scheme::int4}) {
      db::RunSpec spec;
      spec.quant = s;
      spec.group_size = static_cast<int>(size % 7 == 0 ? 32 : 128);
      try {
        const db::ModelConfig o = db::apply_overrides(c, spec);
        (void)db::account_bytes(o, db::AdapterShape{}, db::KernelTraffic{}, 0, 0);
      } catch (const db::Error&) {
      }
    }
  } catch (const db::Error&) {
  }
  return 0;
}
