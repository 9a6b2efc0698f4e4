// libFuzzer target: a GPTQ or AWQ int4 checkpoint, or an FP8 one. The input is an HF
// config.json (its quantization_config: method, bits, group size, sym, checkpoint format,
// version, zero point, modules_to_not_convert; or FP8's activation scheme, block size,
// compressed-tensors groups, targets and ignore), then after a line "#weights" the bytes of the
// directory's model.safetensors (qweight, qzeros, scales and g_idx of each linear, or its
// weight codes, weight_scale_inv/weight_scale and input_scale: their dtypes, shapes and
// contents). Whatever loads is read as the backends read it: every linear converted to the
// canonical int4 or fp8 form, which must equal the same conversion a few rows at a time (as
// the file writers stream it), and the other tensors materialized.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "decodebench/error.h"
#include "decodebench/model.h"
#include "decodebench/weights.h"
#include "fuzz_common.h"

namespace {

// The conversion of `o` in blocks of `step` rows, against the whole: a difference is a bug,
// reported as a crash.
void check_blocks(const db::WeightSource& ws, const db::Origin& o, db::Scheme s) {
  const db::QuantMatrix whole = ws.host_matrix(o, s);
  const int64_t rows = whole.rows;
  const int64_t step = std::max<int64_t>(1, rows / 3);
  for (int64_t r0 = 0; r0 < rows; r0 += step) {
    const int64_t r1 = std::min(rows, r0 + step);
    const db::QuantMatrix b = ws.host_rows(o, s, r0, r1);
    const auto same = [&](const auto& part, const auto& all) {
      const size_t per_row = all.size() / static_cast<size_t>(rows);
      return part.size() == per_row * static_cast<size_t>(r1 - r0) &&
             std::equal(part.begin(), part.end(), all.begin() + static_cast<std::ptrdiff_t>(per_row * r0));
    };
    if (!same(b.qweight, whole.qweight) || !same(b.scales, whole.scales) || !same(b.zeros, whole.zeros))
      std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string marker = "\n#weights\n";
  const size_t split = text.find(marker);
  static const std::string dir = [] {
    const std::string d = db_fuzz::scratch_dir() + "/int4";
    std::filesystem::create_directories(d);
    return d;
  }();
  db_fuzz::write_file("int4/config.json", text.substr(0, split));
  db_fuzz::write_file("int4/model.safetensors",
                      split == std::string::npos ? "" : text.substr(split + marker.size()));
  try {
    const db::ModelConfig c = db::config_for_weights(db::load_model_config(dir), {}, dir);
    const db::WeightSource ws(c, dir, 0);  // every tensor resolved and checked here
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      for (db::Linear lin : db::kLinears) check_blocks(ws, ws.linear(l, lin), c.quant.scheme);
    (void)ws.host_matrix(ws.lm_head(), c.quant.lm_head);
    (void)ws.host_vector(ws.vector(db::kFinalNormName, c.hidden_size));
    std::vector<float> row(static_cast<size_t>(c.hidden_size));
    ws.host_embedding_row(ws.embedding(), c.vocab_size - 1, row.data());
  } catch (const db::Error&) {
  }
  return 0;
}
