// The linear plan and the shape predicates it decides with (see
// include/decodebench/linear_plan.h and linear_shapes.h).
#include "decodebench/linear_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "decodebench/error.h"
#include "decodebench/int4_frag.h"

namespace db {

// ------------------------------------------------------------------------ shape predicates

const char* to_string(MatrixLayout l) {
  switch (l) {
    case MatrixLayout::canonical:
      return "canonical";
    case MatrixLayout::int4_nibbles:
      return "int4-nibbles";
    case MatrixLayout::int4_fragments:
      return "int4-fragments";
    case MatrixLayout::int4_tiles:
      return "int4-tiles";
    case MatrixLayout::int8_tiles:
      return "int8-tiles";
    case MatrixLayout::fp16_tiles:
      return "fp16-tiles";
    case MatrixLayout::mixed_wgmma:
      return "mixed-wgmma";
  }
  return "?";
}

namespace {

// A group the fast kernels stream: whole chunks of 32 int4 weights, located by a shift.
bool streamable_group(int group_size) {
  return group_size >= 32 && (group_size & (group_size - 1)) == 0;
}

}  // namespace

bool fast_gemv_takes(const MatrixShape& m, MatrixLayout layout, const char** why) {
  if (m.cols % weights_per_chunk(m.scheme) != 0) {
    *why = "the fast kernels need the input dimension to be a multiple of 16 bytes of weights";
    return false;
  }
  if (m.scheme == Scheme::int4 && (!streamable_group(m.group_size) || layout == MatrixLayout::canonical)) {
    *why = "int4.gemv needs a power-of-two group size of at least 32 and the repacked layout";
    return false;
  }
  if (layout == MatrixLayout::int4_tiles) {
    *why = "the fast GEMV reads int4 in the nibble order or the fragment layout, not the tiles layout";
    return false;
  }
  if (layout == MatrixLayout::int8_tiles) {
    *why = "the fast GEMV reads int8 in the canonical layout, not the tiles layout";
    return false;
  }
  if (layout == MatrixLayout::fp16_tiles) {
    *why = "the fast GEMV reads fp16 in the canonical layout, not the tiles layout";
    return false;
  }
  return true;
}

bool fast_kernels_run(Scheme scheme, int capability, const char** why) {
  if (scheme == Scheme::fp8 && capability < kFp8Capability) {
    *why = "fp8.gemv converts E4M3 with the cvt instruction of sm_89 and later";
    return false;
  }
  return true;
}

bool skinny_gemm_takes(const MatrixShape& m, MatrixLayout layout, const char** why) {
  if (m.cols % weights_per_chunk(m.scheme) != 0) {
    *why = "the skinny GEMM needs the input dimension to be a multiple of 16 bytes of weights";
    return false;
  }
  if (m.scheme == Scheme::int4 && (layout != MatrixLayout::int4_nibbles || !streamable_group(m.group_size))) {
    *why =
        "the skinny GEMM reads int4 in the repacked nibble layout with a power-of-two group of at least 32";
    return false;
  }
  if (m.scheme != Scheme::int4 && layout != MatrixLayout::canonical) {
    *why = "the skinny GEMM reads int8, fp8 and fp16 in the canonical layout";
    return false;
  }
  return true;
}

bool gemv_columns_takes(const MatrixShape& m, MatrixLayout layout, int64_t batch, const char** why) {
  if (!fast_gemv_takes(m, layout, why)) return false;
  if (layout == MatrixLayout::int4_fragments) {
    *why = "the columns GEMV reads int4 in the repacked nibble layout, not the fragment layout";
    return false;
  }
  if (batch < 2 || batch > kGemvColumnsMaxBatch) {
    *why = "the columns GEMV takes 2 to 8 sequences";
    return false;
  }
  if (batch * m.cols * 2 > kGemvColumnsInputBytes) {
    *why = "the columns GEMV keeps the inputs of all sequences in L1: at most 128 KiB of them";
    return false;
  }
  return true;
}
// The inputs' bound keeps every row within one block of the kernel (8 chunks a thread at most):
// at 2 sequences, up to 32768 fp16 weights a row.
static_assert(kGemvColumnsInputBytes / (2 * 2) <=
                  int64_t{kGemvColumnsMaxThreads} * 8 * weights_per_chunk(Scheme::fp16),
              "a row the columns GEMV takes fits one block");

bool mixed_gemm_takes(const MatrixShape& m, const char** why) {
  if (m.scheme != Scheme::int4 && m.scheme != Scheme::int8) {
    *why = "the mixed-input GEMM reads int4 and int8 weights";
    return false;
  }
  // The layout's k-chunk is 64 columns (kernels/mixed_wgmma_layout.h kChunk), and a chunk never
  // straddles two groups.
  constexpr int64_t kChunk = 64;
  if (m.rows < 1 || m.cols < kChunk || m.cols % kChunk != 0) {
    *why = "cols must be a positive multiple of 64 (the mixed GEMM's k-chunk)";
    return false;
  }
  const int64_t g = m.group_size;
  if (m.scheme == Scheme::int4 && g != 0 && g != m.cols && (g % kChunk != 0 || m.cols % g != 0)) {
    *why = "int4 groups must be a multiple of 64 columns dividing cols, or a whole row";
    return false;
  }
  return true;
}

bool int4_tiles_hold(const MatrixShape& m, const char** why) {
  if (m.scheme != Scheme::int4) {
    *why = "the tiles layout holds int4 weights";
    return false;
  }
  if (m.group_size < 128 || !streamable_group(m.group_size) || m.cols % m.group_size != 0) {
    *why = "the tiles layout needs a power-of-two group of at least 128 columns and whole groups a row";
    return false;
  }
  return true;
}

bool int8_tiles_hold(const MatrixShape& m, const char** why) {
  if (m.scheme != Scheme::int8) {
    *why = "the int8 tiles layout holds int8 weights";
    return false;
  }
  if (m.cols % 64 != 0) {
    *why = "the int8 tiles layout needs whole steps of 64 columns a row";
    return false;
  }
  return true;
}

bool fp16_tiles_hold(const MatrixShape& m, const char** why) {
  if (m.scheme != Scheme::fp16) {
    *why = "the fp16 tiles layout holds fp16 weights";
    return false;
  }
  if (m.cols % 32 != 0) {
    *why = "the fp16 tiles layout needs whole steps of 32 columns a row";
    return false;
  }
  return true;
}

MatrixLayout tiles_layout(Scheme s) {
  return s == Scheme::int4   ? MatrixLayout::int4_tiles
         : s == Scheme::int8 ? MatrixLayout::int8_tiles
         : s == Scheme::fp16 ? MatrixLayout::fp16_tiles
                             : MatrixLayout::canonical;
}

bool tiles_hold(const MatrixShape& m, const char** why) {
  if (m.scheme == Scheme::int8) return int8_tiles_hold(m, why);
  if (m.scheme == Scheme::fp16) return fp16_tiles_hold(m, why);
  return int4_tiles_hold(m, why);
}

bool tiles_gemv_takes(const MatrixShape& m, MatrixLayout layout, int64_t batch, const char** why) {
  if (!tiles_hold(m, why)) return false;
  if (layout != tiles_layout(m.scheme)) {
    *why = m.scheme == Scheme::int8   ? "the tiles GEMV reads int8 in the int8 tiles layout"
           : m.scheme == Scheme::fp16 ? "the tiles GEMV reads fp16 in the fp16 tiles layout"
                                      : "the tiles GEMV reads int4 in the tiles layout";
    return false;
  }
  if (batch < 1 || batch > kTilesGemvMaxBatch) {
    *why = "the tiles GEMV takes 1 to 16 sequences";
    return false;
  }
  return true;
}

namespace {
// An on/off switch of the environment: unset, empty or "on" is on; `off` says what off keeps.
bool switch_on(const char* name, const char* off) {
  const char* v = std::getenv(name);
  if (!v || !*v || std::strcmp(v, "on") == 0) return true;
  if (std::strcmp(v, "off") == 0) return false;
  fail("{}={}: on or off (off keeps {})", name, v, off);
}
}  // namespace

bool tiles_enabled(Scheme s) {
  if (!switch_on("DECODEBENCH_TILES", "the columns GEMV, the skinny GEMM and cuBLAS for int4, int8 and fp16"))
    return false;
  if (s == Scheme::int4)
    return switch_on("DECODEBENCH_INT4_TILES", "the columns GEMV and the skinny GEMM for int4");
  if (s == Scheme::int8)
    return switch_on("DECODEBENCH_INT8_TILES", "the columns GEMV and the skinny GEMM for int8");
  if (s == Scheme::fp16) return switch_on("DECODEBENCH_FP16_TILES", "the columns GEMV and cuBLAS for fp16");
  return false;
}

bool int4_tiles_enabled() {
  return tiles_enabled(Scheme::int4);
}

bool mixed_gemm_enabled() {
  return switch_on("DECODEBENCH_MIXED_GEMM", "the skinny GEMM and the fp16 copy + cuBLAS for int4 and int8");
}

bool prefers_int4_fragments(int64_t rows, int64_t cols, int group_size) {
  return int4_frag::eligible(rows, cols, group_size) && rows * cols >= kInt4FragmentWeights;
}

// ------------------------------------------------------------------------ names

const char* to_string(MatrixKind k) {
  switch (k) {
    case MatrixKind::qkv:
      return "qkv_proj";
    case MatrixKind::o:
      return "o_proj";
    case MatrixKind::gate_up:
      return "gate_up_proj";
    case MatrixKind::down:
      return "down_proj";
    case MatrixKind::lm_head:
      return "lm_head";
  }
  return "?";
}

const char* to_string(BatchedPath p) {
  switch (p) {
    case BatchedPath::none:
      return "none";
    case BatchedPath::tiles_gemv:
      return "tiles-gemv";
    case BatchedPath::gemv_columns:
      return "gemv-columns";
    case BatchedPath::skinny_gemm:
      return "skinny-gemm";
    case BatchedPath::cublas:
      return "cublas";
    case BatchedPath::mixed_gemm:
      return "mixed-gemm";
    case BatchedPath::fp16_copy_cublas:
      return "fp16-copy-cublas";
    case BatchedPath::dequant_cublas:
      return "dequant-cublas";
    case BatchedPath::gemv_per_sequence:
      return "gemv-per-sequence";
  }
  return "?";
}

const char* to_string(StepMode m) {
  switch (m) {
    case StepMode::kernel_per_op:
      return "kernel-per-op";
  }
  return "?";
}

std::string skinny_shape_label(const SkinnyShape& s) {
  return fmt::format("m{}u{}b{}", s.row_tiles, s.chunks, s.blocks_per_sm);
}

std::string tiles_shape_label(const TilesShape& s) {
  return s.ahead == 1 ? fmt::format("rt{}w{}", s.row_tiles, s.warps)
                      : fmt::format("rt{}w{}a{}", s.row_tiles, s.warps, s.ahead);
}

std::string WeightLayout::name() const {
  // The batched step's own layouts (the tiles, the mixed-wgmma layout).
  const auto tiles = [](MatrixLayout l) {
    return l == MatrixLayout::int4_tiles || l == MatrixLayout::int8_tiles || l == MatrixLayout::fp16_tiles ||
           l == MatrixLayout::mixed_wgmma;
  };
  if (std::any_of(matrices.begin(), matrices.end(), tiles)) {
    const MatrixLayout head = matrices[static_cast<int>(MatrixKind::lm_head)], first = matrices[0];
    const auto same = [&](MatrixLayout l) { return l == first; };
    if (std::all_of(matrices.begin(), matrices.end() - 1, same)) {
      if (head == first) return to_string(first);
      // The blocks' tiles beside a canonical lm_head, or an lm_head of another scheme (fp16) in
      // its tiles beside the blocks' layout.
      if ((tiles(first) && head == MatrixLayout::canonical) || tiles(head))
        return fmt::format("{} (lm_head {})", to_string(first), to_string(head));
    }
    std::string v;
    for (MatrixKind k : kAllMatrixKinds)
      v += fmt::format("{}{} {}", v.empty() ? "" : ", ", to_string(k),
                       to_string(matrices[static_cast<int>(k)]));
    return v;
  }
  const bool head = matrices[static_cast<int>(MatrixKind::lm_head)] != MatrixLayout::canonical;
  const bool blocks = std::any_of(matrices.begin(), matrices.end() - 1,
                                  [](MatrixLayout l) { return l != MatrixLayout::canonical; });
  if (blocks && head) return "int4-repacked";
  if (blocks) return "int4-repacked (lm_head canonical)";
  if (head) return "canonical (lm_head int4-repacked)";
  return "canonical";
}

// ------------------------------------------------------------------------ shapes of a model

MatrixShape matrix_shape(const ModelConfig& c, MatrixKind k) {
  const QuantConfig& q = c.quant;
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  auto shape = [&](int64_t rows, int64_t cols, Scheme s) {
    MatrixShape m;
    m.scheme = s;
    m.rows = rows;
    m.cols = cols;
    m.group_size = s == Scheme::int4 ? q.group_size : 0;
    m.zero_point = s == Scheme::int4 && q.zero_point;
    return m;
  };
  switch (k) {
    case MatrixKind::qkv:
      return shape(c.q_dim() + 2 * c.kv_dim(), H, q.scheme);  // q rows, then k, then v
    case MatrixKind::o:
      return shape(H, c.q_dim(), q.scheme);
    case MatrixKind::gate_up:
      return shape(2 * I, H, q.scheme);  // rows interleaved gate_0, up_0, gate_1, ...
    case MatrixKind::down:
      return shape(H, I, q.scheme);
    case MatrixKind::lm_head:
      return shape(V, H, q.lm_head);
  }
  fail("matrix_shape: unknown kind");
}

MatrixShape embedding_shape(const ModelConfig& c) {
  MatrixShape m;
  m.rows = c.vocab_size;
  m.cols = c.hidden_size;
  return m;
}

bool lm_head_tied(const ModelConfig& c) {
  return c.tie_word_embeddings && c.quant.lm_head == Scheme::fp16;
}

// ------------------------------------------------------------------------ the plan

namespace {

// The fast GEMV reads int4 repacked; every other kernel and scheme reads the canonical layout.
bool repacks_int4(Scheme s, LinearImpl impl) {
  return s == Scheme::int4 && impl == LinearImpl::gemv_fast;
}

// Whether the batched step runs the matrix on the tiles GEMV at `batch` sequences, and so
// lays it out in its scheme's tiles layout: the fast kernel's int4, int8 and fp16 matrices
// (fp16: the blocks' of fp16.gemv and the fp16 lm_head of the quantized kernels, tied to the
// embedding or not), from tiles_gemv_min_batch (2; fp16 block matrices 3) to
// kTilesGemvMaxBatch sequences, a matrix the layout holds, unless tiles_enabled says off. Every batched path
// the engine takes such a matrix through reads the layout: the GEMV, the prefill's fp16 copies
// (dequantize_rows_to_f16, fp16 too), the tied embedding's gather (embed_rows), and a merged adapter's merge,
// which is done on the canonical layout before the repack.
bool runs_tiles(const MatrixShape& m, bool lm_head, LinearImpl impl, int64_t batch) {
  const char* why = nullptr;
  return m.scheme != Scheme::fp8 && impl == LinearImpl::gemv_fast &&
         batch >= tiles_gemv_min_batch(m.scheme, lm_head) && batch <= kTilesGemvMaxBatch &&
         tiles_hold(m, &why) && tiles_enabled(m.scheme);
}

// The layout the matrix lies in for `impl` at `batch` sequences: repacked where the fast GEMV
// takes it, in the fragment layout where that pays; in the tiles layout where the batched step
// runs the tiles GEMV on it (batch 1 keeps the rows GEMV's layout); canonical otherwise (a
// matrix the fast GEMV cannot take stays canonical, for the plain GEMV or for the refusal).
MatrixLayout planned_layout(const MatrixShape& m, bool lm_head, LinearImpl impl, int64_t batch) {
  const char* why = nullptr;
  if (m.scheme != Scheme::int4 && runs_tiles(m, lm_head, impl, batch)) return tiles_layout(m.scheme);
  if (!repacks_int4(m.scheme, impl) || !fast_gemv_takes(m, MatrixLayout::int4_nibbles, &why))
    return MatrixLayout::canonical;
  if (runs_tiles(m, lm_head, impl, batch)) return MatrixLayout::int4_tiles;
  return prefers_int4_fragments(m.rows, m.cols, m.group_size) ? MatrixLayout::int4_fragments
                                                              : MatrixLayout::int4_nibbles;
}

// Whether the fast kernels' int4 or int8 matrix runs the mixed-input GEMM (and so lies in its
// layout): kMixedGemmMinBatch to kMixedGemmMaxBatch sequences, on compute capability 9.0 (sm_90a
// code runs there alone) where the build has the kernel (`mixed_gemm`) and mixed_gemm_enabled, for
// the shapes it takes.
bool runs_mixed_gemm(const MatrixShape& m, LinearImpl impl, int64_t batch, int capability, bool mixed_gemm) {
  const char* why = nullptr;
  return mixed_gemm && capability == 90 && batch >= kMixedGemmMinBatch && batch <= kMixedGemmMaxBatch &&
         impl == LinearImpl::gemv_fast && mixed_gemm_takes(m, &why) && mixed_gemm_enabled();
}

// At batch > 1 every linear is one launch over all sequences' rows (docs/kernels.md#batch):
// the fast-kernel linears in a tiles layout run the tiles GEMV (up to kTilesGemvMaxBatch), and
// int4's and int8's in the mixed-wgmma layout the mixed-input GEMM (runs_mixed_gemm); the
// fast kernels' other linears run the columns GEMV up to their scheme's crossover batch where it
// takes the matrix (the rows GEMV, reading each weight once for every sequence). Above it,
// int8, fp8 and int4 run the skinny GEMM where it takes the layout, up to the sequences of one
// launch; fp16 runs cuBLAS, and so do the others above that, on an fp16 copy. cuBLAS streams
// fp16 weights faster than the skinny GEMM at every batch above 1, and past 64 sequences the
// skinny GEMM reads the weights once a launch of 64: the 8b-int4 step at 128 sequences took
// 17.7 ms that way and 16.3 ms on cuBLAS over fp16 copies (H200).
BatchedPath batched_path(const LinearChoice& l, int64_t batch) {
  if (batch <= 1) return BatchedPath::none;
  const char* why = nullptr;
  if (l.layout == MatrixLayout::mixed_wgmma) return BatchedPath::mixed_gemm;
  switch (l.impl) {
    case LinearImpl::gemv_fast:
      if (tiles_gemv_takes(l.shape, l.layout, batch, &why)) return BatchedPath::tiles_gemv;
      if (batch <= gemv_columns_crossover(l.shape.scheme) &&
          gemv_columns_takes(l.shape, l.layout, batch, &why))
        return BatchedPath::gemv_columns;
      if (l.shape.scheme == Scheme::fp16) return BatchedPath::cublas;
      if (batch <= kSkinnyMaxBatch && skinny_gemm_takes(l.shape, l.layout, &why))
        return BatchedPath::skinny_gemm;
      return BatchedPath::fp16_copy_cublas;
    case LinearImpl::gemv_naive:
      return BatchedPath::gemv_per_sequence;
    case LinearImpl::cublas:
      return BatchedPath::cublas;
    case LinearImpl::dequant_cublas:
      return BatchedPath::dequant_cublas;
  }
  return BatchedPath::none;
}

}  // namespace

LinearPlan plan_linears(const ModelConfig& c, const KernelInfo& kernel, int64_t batch, int capability,
                        bool fallback, bool mixed_gemm) {
  LinearPlan p;
  p.batch = batch;
  p.capability = capability;
  p.step = StepMode::kernel_per_op;  // the only step there is
  for (MatrixKind k : kAllMatrixKinds) {
    LinearChoice& l = p[k];
    l.kind = k;
    const bool head = k == MatrixKind::lm_head;
    l.shape = head && lm_head_tied(c) ? embedding_shape(c) : matrix_shape(c, k);
    l.impl = !head || c.quant.lm_head == c.quant.scheme ? kernel.impl : LinearImpl::gemv_fast;
    const char* why = nullptr;
    const MatrixShape& m = l.shape;
    // Whether the fast kernels take the matrix is their batch-1 layout's question: the batched
    // step's tiles layout is chosen below only for matrices they take.
    if (l.impl == LinearImpl::gemv_fast && (!fast_gemv_takes(m, planned_layout(m, head, l.impl, 1), &why) ||
                                            !fast_kernels_run(m.scheme, capability, &why))) {
      // An input dimension that is not whole chunks, a group the kernel cannot stream, fp8
      // below sm_89: the plain GEMV takes any shape on any device (and reads fp16 too, for
      // this).
      if (fallback) {
        l.fallback = fmt::format("{} [{} x {}]: {}.naive, since {}", to_string(k), m.rows, m.cols,
                                 to_string(m.scheme), why);
        l.impl = LinearImpl::gemv_naive;
      } else {
        l.refusal =
            fmt::format("kernel {} cannot run {} [{} x {}]: {}", kernel.name, c.name, m.rows, m.cols, why);
      }
    }
    if (l.impl == LinearImpl::cublas && m.scheme != Scheme::fp16)
      l.refusal = fmt::format("kernel {} needs fp16 weights", kernel.name);
    l.layout = runs_mixed_gemm(m, l.impl, batch, capability, mixed_gemm)
                   ? MatrixLayout::mixed_wgmma
                   : planned_layout(m, head, l.impl, batch);
    l.batched = batched_path(l, batch);
  }
  return p;
}

void check_plan(const LinearPlan& plan) {
  for (const LinearChoice& l : plan.linears)
    if (!l.refusal.empty()) fail("{}", l.refusal);
}

WeightLayout LinearPlan::weight_layout() const {
  WeightLayout w;
  for (const LinearChoice& l : linears) w.matrices[static_cast<int>(l.kind)] = l.layout;
  return w;
}

bool LinearPlan::gemv_blocks() const {
  return std::none_of(linears.begin(), linears.end() - 1,
                      [](const LinearChoice& l) { return runs_cublas(l.impl); });
}

bool LinearPlan::attention_triggers_early() const {
  const LinearChoice& o = (*this)[MatrixKind::o];
  return o.impl == LinearImpl::gemv_fast && o.shape.scheme == Scheme::int4;
}

bool LinearPlan::uses_cublas() const {
  return std::any_of(linears.begin(), linears.end(), [](const LinearChoice& l) {
    return runs_cublas(l.impl) || l.batched == BatchedPath::cublas ||
           l.batched == BatchedPath::fp16_copy_cublas || l.batched == BatchedPath::dequant_cublas;
  });
}

int64_t fp16_chunk_rows(int64_t rows, int64_t cols, int64_t chunk_bytes) {
  if (rows <= 0 || cols <= 0 || chunk_bytes <= 0)
    fail("fp16_chunk_rows: a [{} x {}] matrix in blocks of {} bytes", rows, cols, chunk_bytes);
  const int64_t fit = chunk_bytes / (2 * cols);
  if (fit >= rows) return rows;
  constexpr int64_t kTileRows = 128, kBlockRows = 8;
  const int64_t unit = fit >= kTileRows ? kTileRows : kBlockRows;
  return std::min(rows, std::max(kBlockRows, fit / unit * unit));
}

int64_t fp16_chunk_elements(int64_t rows, int64_t cols, int64_t chunk_bytes) {
  const int64_t r = fp16_chunk_rows(rows, cols, chunk_bytes);
  return (r < rows ? 2 * r : rows) * cols;
}

int64_t LinearPlan::fp16_copy_elements() const {
  int64_t n = 0;
  for (const LinearChoice& l : linears) {
    if (l.impl == LinearImpl::dequant_cublas)  // copied whole, at batch 1 and above
      n = std::max(n, l.shape.weights());
    else if (l.batched == BatchedPath::fp16_copy_cublas)
      n = std::max(n, fp16_chunk_elements(l.shape.rows, l.shape.cols, dequant_chunk_bytes));
  }
  return n;
}

int64_t LinearPlan::fp16_chunk_rows(MatrixKind k) const {
  const MatrixShape& m = (*this)[k].shape;
  return db::fp16_chunk_rows(m.rows, m.cols, dequant_chunk_bytes);
}

std::vector<std::string> LinearPlan::fallbacks() const {
  std::vector<std::string> v;
  for (const LinearChoice& l : linears)
    if (!l.fallback.empty()) v.push_back(l.fallback);
  return v;
}

namespace {
const char* const kMatrixNames[kMatrixKinds] = {"qkv", "o_proj", "gate_up", "down_proj", "lm_head"};
}  // namespace

std::vector<std::string> LinearPlan::batched_path_lines() const {
  std::vector<std::string> v;
  if (batch <= 1) return v;
  for (const LinearChoice& l : linears)
    v.push_back(fmt::format("{} [{} x {}]: {}", kMatrixNames[static_cast<int>(l.kind)], l.shape.rows,
                            l.shape.cols, to_string(l.batched)));
  return v;
}

std::vector<std::string> LinearPlan::kernel_shapes() const {
  const char* const* kNames = kMatrixNames;
  std::vector<std::string> v;
  for (const LinearChoice& l : linears) {
    const char* name = kNames[static_cast<int>(l.kind)];
    if (l.skinny) {
      const SkinnyTiming& t = *l.skinny;
      v.push_back(fmt::format("{} [{} x {}]: {}, {:.1f} us (default {} {:.1f} us)", name, l.shape.rows,
                              l.shape.cols, skinny_shape_label(t.shape), t.us,
                              skinny_shape_label(t.default_shape), t.default_us));
    } else if (l.tiles) {
      const TilesTiming& t = *l.tiles;
      v.push_back(fmt::format("{} [{} x {}]: {}, {:.1f} us (default {} {:.1f} us)", name, l.shape.rows,
                              l.shape.cols, tiles_shape_label(t.shape), t.us,
                              tiles_shape_label(t.default_shape), t.default_us));
    }
  }
  return v;
}

std::vector<BatchedPath> batched_paths(const KernelInfo& kernel) {
  switch (kernel.impl) {
    case LinearImpl::gemv_fast:
      if (kernel.scheme == Scheme::fp16)  // block matrices the first at 2; the tiles from 3
        return {BatchedPath::gemv_columns, BatchedPath::tiles_gemv, BatchedPath::cublas};
      if (kernel.scheme == Scheme::int4 ||
          kernel.scheme ==
              Scheme::int8)  // a matrix the tiles layout holds takes the first, others the second
        return {BatchedPath::tiles_gemv, BatchedPath::gemv_columns, BatchedPath::skinny_gemm,
                BatchedPath::mixed_gemm, BatchedPath::fp16_copy_cublas};
      return {BatchedPath::gemv_columns, BatchedPath::skinny_gemm, BatchedPath::fp16_copy_cublas};
    case LinearImpl::gemv_naive:
      return {BatchedPath::gemv_per_sequence};
    case LinearImpl::cublas:
      return {BatchedPath::cublas};
    case LinearImpl::dequant_cublas:
      return {BatchedPath::dequant_cublas};
  }
  return {};
}

std::vector<MatrixLayout> layouts_read(const KernelInfo& kernel) {
  if (repacks_int4(kernel.scheme, kernel.impl))
    return {MatrixLayout::int4_nibbles, MatrixLayout::int4_fragments, MatrixLayout::int4_tiles,
            MatrixLayout::mixed_wgmma};
  if (kernel.scheme == Scheme::int8 && kernel.impl == LinearImpl::gemv_fast)
    return {MatrixLayout::canonical, MatrixLayout::int8_tiles, MatrixLayout::mixed_wgmma};
  if (kernel.scheme == Scheme::fp16 && kernel.impl == LinearImpl::gemv_fast)
    return {MatrixLayout::canonical, MatrixLayout::fp16_tiles};
  return {MatrixLayout::canonical};
}

}  // namespace db
