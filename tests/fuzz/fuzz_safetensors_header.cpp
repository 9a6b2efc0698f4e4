// libFuzzer target: the bytes of a safetensors file. The reader must refuse anything the
// reference implementation refuses, with a db::Error, and whatever it accepts must be safe
// to use: every tensor's bytes inside the mapping, element counts without overflow, a
// decodebench file's metadata parsed strictly, and a file that fits the micro model
// loadable as its weights (dequantized, as the CPU backend and the writers read them).
#include <cstddef>
#include <cstdint>

#include "decodebench/error.h"
#include "decodebench/safetensors.h"
#include "decodebench/weights.h"
#include "fuzz_common.h"

namespace {

// Reads every tensor's first and last byte: out of the mapping would fault here.
unsigned touch(const db::SafetensorsFile& f) {
  unsigned sum = 0;
  for (const std::string& name : f.names()) {
    const db::TensorInfo& t = f.get(name);
    (void)t.elements();
    if (t.nbytes > 0) sum += t.data[0] + t.data[t.nbytes - 1];
  }
  for (const auto& [k, v] : f.metadata()) sum += static_cast<unsigned>(k.size() + v.size());
  return sum;
}

// The file as the micro model's weights, in the scheme its metadata says.
void load_as_micro(const std::string& path) {
  const db::Checkpoint ck(path);
  const db::FileQuant q = db::decodebench_file_quant(ck);
  db::ModelConfig c = db_fuzz::micro_config();
  if (q.scheme) c.quant.scheme = *q.scheme;
  if (q.lm_head) c.quant.lm_head = *q.lm_head;
  if (q.group_size) c.quant.group_size = *q.group_size;
  if (q.zero_point) c.quant.zero_point = *q.zero_point;
  db::validate(c, "micro");
  const db::WeightSource ws(c, path, 0);
  for (db::Linear l : db::kLinears) (void)ws.host_matrix(ws.linear(0, l), c.quant.scheme);
  (void)ws.host_matrix(ws.lm_head(), c.quant.lm_head);
  (void)ws.host_vector(ws.vector(db::kFinalNormName, c.hidden_size));
  std::vector<float> row(static_cast<size_t>(c.hidden_size));
  ws.host_embedding_row(ws.embedding(), c.vocab_size - 1, row.data());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = db_fuzz::write_file("fuzz.safetensors", data, size);
  try {
    const db::SafetensorsFile f(path);
    volatile unsigned sink = touch(f);
    (void)sink;
    load_as_micro(path);
  } catch (const db::Error&) {
  }
  return 0;
}
