// Byte accounting against hand-computed values for the real Llama-3.1-8B and Qwen3-4B shapes.
#include <gtest/gtest.h>

#include "decodebench/accounting.h"
#include "decodebench/error.h"

using namespace db;

namespace {

ModelConfig llama8b(Scheme s) {
  ModelConfig c;
  c.arch = Arch::llama;
  c.hidden_size = 4096;
  c.num_hidden_layers = 32;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  c.intermediate_size = 14336;
  c.vocab_size = 128256;
  c.tie_word_embeddings = false;
  c.max_position_embeddings = 131072;
  c.quant.scheme = s;
  c.quant.group_size = 128;
  c.quant.zero_point = true;
  return c;
}

ModelConfig qwen4b(Scheme s) {
  ModelConfig c;
  c.arch = Arch::qwen3;
  c.hidden_size = 2560;
  c.num_hidden_layers = 36;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  c.intermediate_size = 9728;
  c.vocab_size = 151936;
  c.tie_word_embeddings = true;
  c.max_position_embeddings = 40960;
  c.quant.scheme = s;
  c.quant.group_size = 128;
  c.quant.zero_point = true;
  return c;
}

// 8b, one layer's linear elements:
//   q 4096*4096 + k 1024*4096 + v 1024*4096 + o 4096*4096 + (gate, up, down) 3*14336*4096
constexpr uint64_t k8bLayerElems =
    4096ull * 4096 * 2 + 1024ull * 4096 * 2 + 3ull * 14336 * 4096;  // 218,103,808
constexpr uint64_t k8bElems = 32 * k8bLayerElems;                   // 6,979,321,856
// rows (output features) per layer: 4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096
constexpr uint64_t k8bLayerRows = 43008;
constexpr uint64_t k8bLmHead = 128256ull * 4096 * 2;       // fp16
constexpr uint64_t k8bNorms = (2 * 32 + 1) * 4096ull * 2;  // two per layer + final, fp16
constexpr uint64_t k8bKvPerPos = 2ull * 32 * 8 * 128 * 2;  // K and V, 32 layers, 8 heads x 128, fp16

// 4b (Qwen3, q_dim 4096 != hidden 2560):
//   q 4096*2560 + k 1024*2560 + v 1024*2560 + o 2560*4096 + 3*9728*2560
constexpr uint64_t k4bLayerElems =
    4096ull * 2560 * 2 + 1024ull * 2560 * 2 + 3ull * 9728 * 2560;  // 100,925,440
constexpr uint64_t k4bElems = 36 * k4bLayerElems;
constexpr uint64_t k4bLayerRows = 4096 + 1024 + 1024 + 2560 + 9728 + 9728 + 2560;
constexpr uint64_t k4bLmHead = 151936ull * 2560 * 2;  // tied: the fp16 embedding table
constexpr uint64_t k4bNorms = (2 * 36 + 1) * 2560ull * 2 + 2 * 36 * 128ull * 2;  // + q_norm, k_norm
constexpr uint64_t k4bKvPerPos = 2ull * 36 * 8 * 128 * 2;

}  // namespace

TEST(Accounting, Llama8bAtEachScheme) {
  const ByteAccount f = account_bytes(llama8b(Scheme::fp16), {}, {}, 0, 0);
  EXPECT_EQ(k8bLayerElems, 218103808u);
  EXPECT_EQ(f.per_token.linear_weights, k8bElems * 2);
  EXPECT_EQ(f.per_token.scales, 0u);
  EXPECT_EQ(f.per_token.lm_head, k8bLmHead);
  EXPECT_EQ(f.per_token.embedding_row, 4096u * 2);
  EXPECT_EQ(f.per_token.norms, k8bNorms);
  EXPECT_EQ(f.per_token.kv_read, k8bKvPerPos * 1);  // position 0 reads itself
  EXPECT_EQ(f.per_token.kv_write, k8bKvPerPos);
  EXPECT_EQ(f.per_token.total, k8bElems * 2 + k8bLmHead + 8192 + k8bNorms + 2 * k8bKvPerPos);

  const ByteAccount i8 = account_bytes(llama8b(Scheme::int8), {}, {}, 0, 0);
  EXPECT_EQ(i8.per_token.linear_weights, k8bElems);
  EXPECT_EQ(i8.per_token.scales, 32 * k8bLayerRows * 2);  // one fp16 scale per row
  EXPECT_EQ(i8.per_token.zeros, 0u);

  // fp8: the weights' bytes of int8, a float scale a row.
  const ByteAccount f8 = account_bytes(llama8b(Scheme::fp8), {}, {}, 0, 0);
  EXPECT_EQ(f8.per_token.linear_weights, k8bElems);
  EXPECT_EQ(f8.per_token.scales, 32 * k8bLayerRows * 4);
  EXPECT_EQ(f8.per_token.zeros, 0u);
  EXPECT_EQ(f8.per_token.total, i8.per_token.total + 32 * k8bLayerRows * 2);

  const ByteAccount i4 = account_bytes(llama8b(Scheme::int4), {}, {}, 0, 0);
  EXPECT_EQ(i4.per_token.linear_weights, k8bElems / 2);  // 3,489,660,928
  EXPECT_EQ(i4.per_token.scales, k8bElems / 128 * 2);    // one fp16 per group of 128
  EXPECT_EQ(i4.per_token.zeros, k8bElems / 128);         // one u8 per group
  const uint64_t total = k8bElems / 2 + k8bElems / 128 * 3 + k8bLmHead + 8192 + k8bNorms + 2 * k8bKvPerPos;
  EXPECT_EQ(i4.per_token.total, total);
  EXPECT_NEAR(i4.per_token.total / 1e9, 4.70, 0.01);  // the "8B-INT4 ~4.7 GB per token with an fp16 lm_head"
  // Stored: linears + the fp16 embedding table + untied fp16 lm_head + norms.
  EXPECT_EQ(i4.stored.total, k8bElems / 2 + k8bElems / 128 * 3 + 128256ull * 4096 * 2 + k8bLmHead + k8bNorms);
}

TEST(Accounting, Qwen4bAtEachSchemeTiedEmbedding) {
  const ByteAccount f = account_bytes(qwen4b(Scheme::fp16), {}, {}, 0, 0);
  EXPECT_EQ(k4bLayerElems, 100925440u);
  EXPECT_EQ(f.per_token.linear_weights, k4bElems * 2);
  EXPECT_EQ(f.per_token.lm_head, k4bLmHead);
  EXPECT_EQ(f.per_token.norms, k4bNorms);
  EXPECT_EQ(f.stored.lm_head, 0u);  // tied to the fp16 embedding: stored once
  const ByteAccount i8 = account_bytes(qwen4b(Scheme::int8), {}, {}, 0, 0);
  EXPECT_EQ(i8.per_token.linear_weights + i8.per_token.scales, k4bElems + 36 * k4bLayerRows * 2);
  EXPECT_EQ(i8.per_token.total,
            k4bElems + 36 * k4bLayerRows * 2 + k4bLmHead + 2560 * 2 + k4bNorms + 2 * k4bKvPerPos);
  const ByteAccount i4 = account_bytes(qwen4b(Scheme::int4), {}, {}, 0, 0);
  EXPECT_EQ(i4.per_token.linear_weights + i4.per_token.scales + i4.per_token.zeros,
            k4bElems / 2 + k4bElems / 128 * 3);
}

// Qwen2.5-7B shape, int4 g128: 28 layers, hidden 3584, q 28 x 128, kv 4 x 128, intermediate
// 18944, vocab 152064, untied. Its q/k/v biases are read every step and stored once.
TEST(Accounting, Qwen2BiasesAreReadEveryStepAndStored) {
  const ModelConfig c = db::load_model_config("qwen2-7b-int4");
  const ByteAccount a = account_bytes(c, {}, {}, 0, 0);
  const uint64_t biases = 28ull * (3584 + 2 * 512) * 2;  // 258,048
  EXPECT_EQ(a.per_token.biases, biases);
  EXPECT_EQ(a.stored.biases, biases);
  const uint64_t layer_elems = 3584ull * 3584 * 2 + 512ull * 3584 * 2 + 3ull * 18944 * 3584;
  const uint64_t elems = 28 * layer_elems;
  const uint64_t lm_head = 152064ull * 3584 * 2;
  const uint64_t norms = (2 * 28 + 1) * 3584ull * 2;
  const uint64_t kv = 2ull * 28 * 512 * 2;
  EXPECT_EQ(a.per_token.norms, norms);
  EXPECT_EQ(a.per_token.total, elems / 2 + elems / 128 * 3 + lm_head + 3584 * 2 + norms + biases + 2 * kv);
  EXPECT_EQ(a.stored.total, elems / 2 + elems / 128 * 3 + 152064ull * 3584 * 2 + lm_head + norms + biases);
  // The same shapes as llama: only the biases differ.
  ModelConfig llama = c;
  llama.arch = Arch::llama;
  const ByteAccount l = account_bytes(llama, {}, {}, 0, 0);
  EXPECT_EQ(l.per_token.biases, 0u);
  EXPECT_EQ(a.per_token.total - l.per_token.total, biases);
  EXPECT_EQ(a.stored.total - l.stored.total, biases);
}

TEST(Accounting, KvReadGrowsLinearlyWithPosition) {
  const ModelConfig c = llama8b(Scheme::int4);
  for (int64_t pos : {0, 1, 127, 4095, 32767}) {
    const ByteAccount a = account_bytes(c, {}, {}, pos, pos);
    EXPECT_EQ(a.per_token.kv_read, k8bKvPerPos * static_cast<uint64_t>(pos + 1)) << pos;
    EXPECT_EQ(a.per_token.kv_write, k8bKvPerPos);
  }
  // Over a range, the mean: positions 100..227 read (101 + 228) / 2 = 164.5 positions.
  const ByteAccount r = account_bytes(c, {}, {}, 100, 227);
  EXPECT_EQ(r.per_token.kv_read, k8bKvPerPos * 329 / 2);
}

// The KV cache's scheme sets its bytes. 8b at context 32768, one timed token: the step reads K
// and V of positions 0..32768 (32769 of them) and writes those of one. fp16 stores 2 bytes an
// element: 2 (K, V) x 32 layers x 8 kv heads x 128 = 131,072 bytes a position, 4.29 GB read.
// fp8 and int8 store one byte an element (half of fp16's) and, for each position, layer, kv
// head and K|V, a float scale: 4 x 8 x 32 x 2 = 2,048 bytes a position.
TEST(Accounting, KvCacheBytesAreTheSchemesElementsAndScales) {
  constexpr uint64_t positions = 32769;
  constexpr uint64_t fp16_per_position = 2ull * 32 * 8 * 128 * 2;  // 131,072
  constexpr uint64_t scales_per_position = 4ull * 8 * 32 * 2;      // 2,048
  ModelConfig c = llama8b(Scheme::int4);
  const ByteAccount h = account_bytes(c, {}, {}, 32768, 32768);
  EXPECT_EQ(h.per_token.kv_read, fp16_per_position * positions);
  EXPECT_NEAR(h.per_token.kv_read / 1e9, 4.29, 0.01);
  EXPECT_EQ(h.per_token.kv_read_scales, 0u);
  EXPECT_EQ(h.per_token.kv_write_scales, 0u);
  for (KvScheme s : {KvScheme::fp8, KvScheme::int8}) {
    c.kv_cache = s;
    const ByteAccount q = account_bytes(c, {}, {}, 32768, 32768);
    EXPECT_EQ(q.per_token.kv_read, fp16_per_position / 2 * positions) << to_string(s);
    EXPECT_EQ(q.per_token.kv_read_scales, scales_per_position * positions) << to_string(s);
    EXPECT_EQ(q.per_token.kv_write, fp16_per_position / 2) << to_string(s);
    EXPECT_EQ(q.per_token.kv_write_scales, scales_per_position) << to_string(s);
    EXPECT_NEAR((q.per_token.kv_read + q.per_token.kv_read_scales) / 1e9, 2.21, 0.01) << to_string(s);
    // The total, and so the floor, counts them all; nothing else changes.
    EXPECT_EQ(h.per_token.total - q.per_token.total,
              (fp16_per_position / 2 - scales_per_position) * (positions + 1))
        << to_string(s);
    EXPECT_EQ(q.per_token.linear_weights, h.per_token.linear_weights);
    EXPECT_EQ(q.stored.total, h.stored.total);  // the cache is not the weights
  }
  // At batch B every sequence reads and writes its own cache, scales included.
  const ByteAccount b = account_bytes(c, {}, {}, 32768, 32768, 4);
  EXPECT_EQ(b.per_token.kv_read_scales, 4 * scales_per_position * positions);
  EXPECT_EQ(b.per_token.kv_write_scales, 4 * scales_per_position);
}

TEST(Accounting, ExternalAdapterAddsItsBytesMergedDoesNot) {
  AdapterShape a;
  a.rank = 16;
  a.targets = {Linear::q, Linear::down};
  a.mode = AdapterMode::external;
  const ModelConfig c = llama8b(Scheme::int4);
  const ByteAccount base = account_bytes(c, {}, {}, 0, 0);
  const ByteAccount ext = account_bytes(c, a, {}, 0, 0);
  // q: A [16, 4096] + B [4096, 16]; down: A [16, 14336] + B [4096, 16]; fp16; 32 layers.
  const uint64_t adapter = 32ull * 16 * ((4096 + 4096) + (14336 + 4096)) * 2;
  EXPECT_EQ(ext.per_token.adapter, adapter);
  EXPECT_EQ(ext.per_token.total, base.per_token.total + adapter);
  a.mode = AdapterMode::merged;
  EXPECT_EQ(account_bytes(c, a, {}, 0, 0).per_token.total, base.per_token.total);
}

TEST(Accounting, DequantKernelTrafficIsReportedOutsideTheTotal) {
  const ModelConfig c = llama8b(Scheme::int4);
  const ByteAccount a = account_bytes(c, {}, KernelTraffic{4.0}, 0, 0);
  EXPECT_EQ(a.per_token.kernel_extra, k8bElems * 4);
  EXPECT_EQ(a.per_token.total, account_bytes(c, {}, {}, 0, 0).per_token.total);
  // With an int4 lm_head the chosen kernel runs it too: its 128256 x 4096 weights count.
  ModelConfig h = c;
  h.quant.lm_head = Scheme::int4;
  EXPECT_EQ(account_bytes(h, {}, KernelTraffic{4.0}, 0, 0).per_token.kernel_extra,
            (k8bElems + 128256ull * 4096) * 4);
}

// --batch B on the tiny model (2 layers, hidden 128, q 4 x 32, kv 2 x 32, intermediate 256,
// vocab 512, fp16), positions 0..3, B = 3. One layer's linears hold
//   q 128*128 + k 64*128 + v 64*128 + o 128*128 + gate, up 2*256*128 + down 128*256 = 147,456
// elements; the weights are read once a step, what each sequence has of its own 3 times.
TEST(Accounting, AtBatchTheWeightsOnceAndEverySequencesOwn) {
  const ModelConfig c = db::load_model_config("tiny-fp16");
  const ByteAccount a = account_bytes(c, {}, {}, 0, 3, 3);
  const PerTokenBytes& t = a.per_token;
  EXPECT_EQ(t.linear_weights, 2u * 147'456 * 2);  // fp16, 2 layers: once
  EXPECT_EQ(t.lm_head, 512u * 128 * 2);
  EXPECT_EQ(t.norms, 5u * 128 * 2);
  EXPECT_EQ(t.embedding_row, 3u * 128 * 2);  // a row per sequence
  // K and V: 2 layers x 64 x 2 (K, V) x 2 bytes = 512 bytes a position; positions 0..3
  // read (1 + 4) / 2 = 2.5 positions on average; 3 sequences.
  EXPECT_EQ(t.kv_read, 512u * 5 / 2 * 3);
  EXPECT_EQ(t.kv_write, 512u * 3);
  // Per layer 4H + 2 q_dim + 2 kv_dim + 2I = 512 + 256 + 128 + 512 = 1408 fp16 values in and
  // out of the multiplies, 2 layers, and the lm_head's input H: 2944 values, 5888 bytes.
  EXPECT_EQ(db::activation_bytes_per_sequence(c), 5888u);
  EXPECT_EQ(t.activations, 3u * 5888);
  EXPECT_EQ(t.total, 589'824u + 131'072 + 768 + 1280 + 3840 + 1536 + 17'664);  // 745,984
  EXPECT_EQ(a.stored.total, account_bytes(c, {}, {}, 0, 3).stored.total) << "what is stored does not batch";
}

TEST(Accounting, BatchOneIsTheStepItAlwaysWas) {
  for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4, Scheme::fp8}) {
    const ModelConfig c = llama8b(s);
    const ByteAccount one = account_bytes(c, {}, {}, 100, 227, 1), plain = account_bytes(c, {}, {}, 100, 227);
    EXPECT_EQ(one.per_token.total, plain.per_token.total);
    EXPECT_EQ(one.per_token.activations, 0u) << "batch 1's activations stay in cache: not counted";
  }
  // 8b at batch 16: weights once, 16 sequences' KV, embedding rows and activations.
  const ModelConfig c = llama8b(Scheme::int4);
  const ByteAccount one = account_bytes(c, {}, {}, 0, 127), b16 = account_bytes(c, {}, {}, 0, 127, 16);
  EXPECT_EQ(b16.per_token.linear_weights, one.per_token.linear_weights);
  EXPECT_EQ(b16.per_token.lm_head, one.per_token.lm_head);
  EXPECT_EQ(b16.per_token.kv_read, 16 * one.per_token.kv_read);
  // 8b: per layer 4*4096 + 2*4096 + 2*1024 + 2*14336 = 55,296 values, 32 layers, + 4096.
  EXPECT_EQ(b16.per_token.activations, 16ull * (32 * 55'296 + 4096) * 2);
  EXPECT_THROW(account_bytes(c, {}, {}, 0, 0, 0), db::Error);
}

// FLOPs of the same tiny step: a multiply-add is 2.
TEST(Accounting, FlopsOfAStepAtBatch) {
  const ModelConfig c = db::load_model_config("tiny-int4");
  const StepFlops f = account_flops(c, {}, 0, 3, 3);
  EXPECT_EQ(f.linear, 2u * 2 * 147'456 * 3);  // 2 layers, 3 sequences: 1,769,472
  EXPECT_EQ(f.lm_head, 2u * 512 * 128 * 3);   // 393,216
  // q.k and p.v: 2 x 2 x q_dim 128 per position, (1 + 4) / 2 positions, 2 layers, 3 sequences.
  EXPECT_EQ(f.attention, 4u * 128 * 5 / 2 * 2 * 3);  // 7,680
  EXPECT_EQ(f.adapter, 0u);
  EXPECT_EQ(f.total, 1'769'472u + 393'216 + 7'680);
  // The scheme does not change the arithmetic; the batch multiplies all of it.
  EXPECT_EQ(account_flops(db::load_model_config("tiny-fp16"), {}, 0, 3, 3).total, f.total);
  const StepFlops one = account_flops(c, {}, 0, 3);
  EXPECT_EQ(3 * one.total, f.total);
  // An external adapter adds 2 x rank x (rows + cols) per target, layer and sequence.
  AdapterShape a;
  a.rank = 4;
  a.targets = {Linear::q, Linear::down};
  a.mode = AdapterMode::external;
  EXPECT_EQ(account_flops(c, a, 0, 3, 3).adapter, 2u * 4 * ((128 + 128) + (128 + 256)) * 2 * 3);
  a.mode = AdapterMode::merged;
  EXPECT_EQ(account_flops(c, a, 0, 3, 3).adapter, 0u);
}
