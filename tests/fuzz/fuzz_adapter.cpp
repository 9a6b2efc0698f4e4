// libFuzzer target: LoRA adapters, both ways a user names one. The first byte chooses:
//   'S'  the rest is an --adapter spec ("synthetic:rank=4,targets=q,v"): parsed, loaded on
//        the micro model and merged into one of its matrices;
//   else the rest is an adapter_config.json, loaded from a directory whose
//        adapter_model.safetensors holds a rank-4 adapter of the micro model for all seven
//        linears (so a config that says so loads whole, and its target_modules, a list or a
//        regular expression, are matched against the model's module names).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "decodebench/adapter.h"
#include "decodebench/error.h"
#include "decodebench/model.h"
#include "decodebench/safetensors.h"
#include "fuzz_common.h"

namespace {

// Written once: the A and B of a synthetic rank-4 adapter, under PEFT's tensor names.
const std::string& adapter_dir() {
  static const std::string dir = [] {
    const db::ModelConfig& c = db_fuzz::micro_config();
    static const db::Adapter a = db::load_adapter("synthetic:rank=4", c, 1, db::AdapterMode::merged);
    const std::string d = db_fuzz::scratch_dir();
    db::SafetensorsWriter w(d + "/adapter_model.safetensors");
    for (db::Linear l : a.targets) {
      const db::MatShape s = db::linear_shape(c, l);
      const db::LoraPair* p = a.find(0, l);
      w.add(db::lora_tensor_name(0, l, false), db::DType::f32, {a.rank, s.cols}, p->a.data());
      w.add(db::lora_tensor_name(0, l, true), db::DType::f32, {s.rows, a.rank}, p->b.data());
    }
    w.finish();
    return d;
  }();
  return dir;
}

void use(const db::Adapter& a) {
  const db::ModelConfig& c = db_fuzz::micro_config();
  (void)a.target_names();
  (void)a.host_bytes();
  (void)a.scale_f();
  for (db::Linear l : a.targets) {
    const db::MatShape s = db::linear_shape(c, l);
    std::vector<float> w(static_cast<size_t>(s.elements()), 0.01f);
    db::merge_adapter(a, 0, l, w.data(), s.rows, s.cols);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const db::ModelConfig& c = db_fuzz::micro_config();
  try {
    if (data[0] == 'S') {
      if (db::is_synthetic_adapter(rest)) (void)db::parse_synthetic_adapter(rest);
      use(db::load_adapter(rest, c, 0, db::AdapterMode::external));
    } else {
      const std::string dir = adapter_dir();
      db_fuzz::write_file("adapter_config.json", rest);
      use(db::load_adapter(dir, c, 0, db::AdapterMode::merged));
    }
  } catch (const db::Error&) {
  }
  return 0;
}
