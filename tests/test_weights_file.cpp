// gen-weights and quantize stream each matrix a block of rows at a time: a block of rows
// (WeightSource::host_rows) is bit for bit those rows of the whole matrix for every kind of
// origin, and a file written across several blocks holds what host_matrix computes.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "cli_helpers.h"
#include "decodebench/adapter.h"
#include "decodebench/error.h"
#include "decodebench/model.h"
#include "decodebench/safetensors.h"
#include "decodebench/weights.h"
#include "temp_dir.h"

using namespace db;

namespace {

const std::string kData = DB_TEST_DATA;

ModelConfig config(const std::string& model, std::optional<Scheme> quant = std::nullopt,
                   const std::string& weights = "") {
  return config_for_weights(load_model_config(model), {quant}, weights);
}

// Rows [r0, r1) of m, as a matrix of its own.
QuantMatrix rows_of(const QuantMatrix& m, int64_t r0, int64_t r1) {
  QuantMatrix out = m;
  const auto cut = [&](auto& v) {
    const size_t per_row = v.size() / static_cast<size_t>(m.rows);
    v.assign(v.begin() + static_cast<std::ptrdiff_t>(per_row * r0),
             v.begin() + static_cast<std::ptrdiff_t>(per_row * r1));
  };
  out.rows = r1 - r0;
  cut(out.qweight);
  cut(out.scales);
  cut(out.zeros);
  return out;
}

// Every matrix of `ws`, cut into blocks of uneven sizes: each block equals those rows of
// host_matrix.
void expect_blocks_are_rows(const WeightSource& ws, const std::string& what) {
  const ModelConfig& c = ws.config();
  std::vector<std::pair<Origin, Scheme>> matrices = {{ws.embedding(), Scheme::fp16},
                                                     {ws.lm_head(), c.quant.lm_head}};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (Linear lin : kLinears) matrices.push_back({ws.linear(l, lin), c.quant.scheme});
  for (const auto& [o, s] : matrices) {
    const QuantMatrix whole = ws.host_matrix(o, s);
    const int64_t rows = whole.rows;
    for (const int64_t step : {int64_t{1}, int64_t{7}, rows / 3 + 1}) {
      for (int64_t r0 = 0; r0 < rows; r0 += step) {
        const int64_t r1 = std::min(rows, r0 + step);
        const QuantMatrix block = ws.host_rows(o, s, r0, r1), want = rows_of(whole, r0, r1);
        ASSERT_EQ(block.rows, r1 - r0);
        ASSERT_EQ(block.cols, whole.cols);
        ASSERT_EQ(block.qweight, want.qweight) << what << ": " << o.name << " rows " << r0 << ".." << r1;
        ASSERT_EQ(block.scales, want.scales) << what << ": " << o.name << " rows " << r0 << ".." << r1;
        ASSERT_EQ(block.zeros, want.zeros) << what << ": " << o.name << " rows " << r0 << ".." << r1;
      }
    }
  }
}

class WeightsFile : public db_test::TempDirTest {};

TEST_F(WeightsFile, ABlockOfRowsIsThoseRowsOfTheWholeMatrixForEveryOrigin) {
  for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4, Scheme::fp8}) {  // synthetic
    const ModelConfig c = config("tiny", s);
    expect_blocks_are_rows(WeightSource(c, "", 3), std::string("synthetic ") + to_string(s));
  }
  for (const char* hf : {"/hf/tiny-llama", "/hf/tiny-llama-bf16", "/hf/tiny-qwen2"}) {  // dense
    const ModelConfig c = config(kData + hf, Scheme::int4, kData + hf);
    expect_blocks_are_rows(WeightSource(c, kData + hf, 0), hf);
  }
  for (const char* int4 : {"gptq-v1-sym", "gptq-v1-asym", "gptq-v2-asym", "awq"}) {  // packed
    const std::string d = kData + "/int4/" + int4;
    expect_blocks_are_rows(WeightSource(config(d, std::nullopt, d), d, 0), int4);
  }
  for (const char* q : {"int8", "int4", "fp8"}) {  // decodebench's own, and merged with an adapter
    const std::string file = path(std::string(q) + ".safetensors");
    ASSERT_EQ(db_test::run({"gen-weights", "--model", "tiny", "--quant", q, "-o", file}).code, 0);
    const ModelConfig c = config("tiny", parse_scheme(q), file);
    expect_blocks_are_rows(WeightSource(c, file, 0), std::string("decodebench ") + q);
    const Adapter a = load_adapter("synthetic:rank=4", c, 0, AdapterMode::merged);
    expect_blocks_are_rows(WeightSource(c, file, 0, &a), std::string("merged into decodebench ") + q);
    const ModelConfig synth = config("tiny", parse_scheme(q));
    expect_blocks_are_rows(WeightSource(synth, "", 0, &a), std::string("merged into synthetic ") + q);
  }
}

// A vocabulary of 2^20 rows of 32 columns streams in two blocks of 2^19 rows (2^24 floats a
// block): the embedding, and the lm_head in int4 and int8, hold host_matrix's bytes.
TEST_F(WeightsFile, AMatrixWrittenInSeveralBlocksHoldsTheWholeMatrixsBytes) {
  for (const char* lm_head : {"int4", "int8"}) {
    const std::string model = path("wide.json"), file = path("wide.safetensors");
    std::ofstream(model)
        << R"({"extends": "tiny", "vocab_size": 1048576, "hidden_size": 32, "head_dim": 8,)"
        << R"( "quant": {"scheme": "int8", "group_size": 32, "zero_point": true, "lm_head": ")" << lm_head
        << "\"}}";
    const db_test::Outcome o = db_test::run({"gen-weights", "--model", model, "--seed", "5", "-o", file});
    ASSERT_EQ(o.code, 0) << o.err;
    const ModelConfig c = config(model);
    const WeightSource ws(c, "", 5);
    const SafetensorsFile f(file);
    const auto bytes = [&](const std::string& name) {
      const TensorInfo& t = f.get(name);
      return std::vector<uint8_t>(t.data, t.data + t.nbytes);
    };
    const auto as_bytes = [](const auto& v) {
      const auto* p = reinterpret_cast<const uint8_t*>(v.data());
      return std::vector<uint8_t>(p, p + v.size() * sizeof(v[0]));
    };
    EXPECT_EQ(bytes(kEmbedName), ws.host_matrix(ws.embedding(), Scheme::fp16).qweight);
    const QuantMatrix head = ws.host_matrix(ws.lm_head(), c.quant.lm_head);
    EXPECT_EQ(bytes("lm_head.qweight"), head.qweight) << lm_head;
    EXPECT_EQ(bytes("lm_head.scales"), as_bytes(head.scales)) << lm_head;
    if (c.quant.lm_head == Scheme::int4) EXPECT_EQ(bytes("lm_head.zeros"), head.zeros);
    const QuantMatrix down = ws.host_matrix(ws.linear(1, Linear::down), Scheme::int8);
    EXPECT_EQ(bytes("model.layers.1.mlp.down_proj.qweight"), down.qweight);
    EXPECT_EQ(bytes("model.layers.1.mlp.down_proj.scales"), as_bytes(down.scales));
  }
}

TEST(HostRows, RowsOutsideTheMatrixAreAnError) {
  const ModelConfig c = config("tiny");
  const WeightSource ws(c, "", 0);
  const Origin o = ws.linear(0, Linear::q);
  for (const auto& [r0, r1] :
       std::vector<std::pair<int64_t, int64_t>>{{-1, 2}, {3, 2}, {0, o.shape[0] + 1}}) {
    try {
      (void)ws.host_rows(o, Scheme::fp16, r0, r1);
      ADD_FAILURE() << r0 << ".." << r1 << " did not fail";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("are not rows of"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
