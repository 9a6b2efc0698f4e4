// libFuzzer target: a model config, with "extends". The input is the config file; the part
// after a line "#base" (when there is one) is written beside it as base.json, so that a
// config may extend a file as well as a preset (and the two may extend each other). A first
// line "#chain N" makes a chain: the config's text, every "@next" in it replaced by the next
// link's name, is written as link 1 .. N too (at most kMaxLinks), the last link's "@next"
// naming base.json, so that chains of any depth up to past the limit are reached. What loads
// must give shapes, a parameter count, RoPE tables and byte accounting without overflow, and
// survive the command line's overrides (an HF config's GPTQ/AWQ quantization_config among
// them).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "decodebench/accounting.h"
#include "decodebench/config.h"
#include "decodebench/error.h"
#include "decodebench/model.h"
#include "decodebench/rope.h"
#include "fuzz_common.h"

namespace {

// Past the chain limit (kMaxExtendsDepth), with room: a longer chain only costs time.
constexpr size_t kMaxLinks = db::kMaxExtendsDepth + 86;

std::string link_name(size_t i) {
  return "chain" + std::to_string(i) + ".json";
}

std::string with_next(std::string text, const std::string& next) {
  for (size_t at = text.find("@next"); at != std::string::npos; at = text.find("@next", at + next.size()))
    text.replace(at, 5, next);
  return text;
}

// "#chain N\n" at the start: N (capped) and the rest of the text; otherwise 0 and the text.
size_t chain_length(std::string& text) {
  const std::string marker = "#chain ";
  if (text.compare(0, marker.size(), marker) != 0) return 0;
  const size_t eol = text.find('\n');
  size_t n = 0;
  for (size_t i = marker.size(); i < std::min(eol, text.size()) && n <= kMaxLinks; ++i) {
    if (text[i] < '0' || text[i] > '9') break;
    n = n * 10 + static_cast<size_t>(text[i] - '0');
  }
  text = eol == std::string::npos ? "" : text.substr(eol + 1);
  return std::min(n, kMaxLinks);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  const size_t links = chain_length(text);
  const std::string marker = "\n#base\n";
  const size_t split = text.find(marker);
  db_fuzz::write_file("base.json", split == std::string::npos ? "{}" : text.substr(split + marker.size()));
  const std::string config = text.substr(0, split);
  // A previous input's longer chain must not be found by this one's names.
  static size_t written = 0;
  for (size_t i = links + 1; i <= written; ++i)
    std::remove((db_fuzz::scratch_dir() + "/" + link_name(i)).c_str());
  written = links;
  for (size_t i = 1; i <= links; ++i)
    db_fuzz::write_file(link_name(i), with_next(config, i < links ? link_name(i + 1) : "base.json"));
  const std::string path =
      db_fuzz::write_file("model.json", with_next(config, links > 0 ? link_name(1) : "base.json"));
  try {
    const db::ModelConfig c = db::load_model_config(path);
    (void)db::parameter_count(c);
    for (db::Linear l : db::kLinears) (void)db::linear_shape(c, l).elements();
    (void)db::rope_inv_freq(c);
    (void)db::rope_table(c, std::min<int64_t>(c.max_position_embeddings, 4));
    (void)db::account_bytes(c, db::AdapterShape{}, db::KernelTraffic{}, 0, c.max_position_embeddings - 1);
    try {  // as a run without overrides takes it: an HF int4 config's scheme and group size
      const db::ModelConfig o = db::apply_overrides(c);
      (void)db::account_bytes(o, db::AdapterShape{}, db::KernelTraffic{}, 0, 0);
    } catch (const db::Error&) {
    }
    for (db::Scheme s : {db::Scheme::fp16, db::Scheme::int8, db::Scheme::int4}) {
      const db::QuantOverrides asked{s, static_cast<int>(size % 7 == 0 ? 32 : 128)};
      try {
        const db::ModelConfig o = db::apply_overrides(c, asked);
        (void)db::account_bytes(o, db::AdapterShape{}, db::KernelTraffic{}, 0, 0);
      } catch (const db::Error&) {
      }
    }
  } catch (const db::Error&) {
  }
  return 0;
}
