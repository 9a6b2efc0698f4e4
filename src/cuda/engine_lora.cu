// The CUDA engine's LoRA part (see engine_lora.cuh).
#include "engine_lora.cuh"

#include <algorithm>
#include <array>

#include "common.cuh"
#include "decodebench/accounting.h"
#include "decodebench/half.h"
#include "step.cuh"

namespace db::cuda {
namespace {

// The linears of one fused matrix (a LoraSite), in the row layout of DeviceLayer:
// a linear's row r is the fused row offset + r * stride.
struct SiteLinear {
  Linear linear;
  int64_t offset, stride;
};
struct SiteLayout {
  std::vector<SiteLinear> linears;
  int64_t in = 0;    // input dimension
  int64_t rows = 0;  // fused rows
};

// Indexed by LoraSite: qkv, o, gate_up, down.
std::array<SiteLayout, 4> lora_sites(const ModelConfig& c) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, qd = c.q_dim(), kvd = c.kv_dim();
  return {{{{{Linear::q, 0, 1}, {Linear::k, qd, 1}, {Linear::v, qd + kvd, 1}}, H, qd + 2 * kvd},
           {{{Linear::o, 0, 1}}, qd, H},
           {{{Linear::gate, 0, 2}, {Linear::up, 1, 2}}, H, 2 * I},
           {{{Linear::down, 0, 1}}, I, H}}};
}

// fp16 elements of one (layer, site) group of an external adapter: the A of its adapted
// linears stacked, then each one's B. Rounded up to 8 so that every group's A starts on a
// 16-byte boundary (the shrink's vector loads).
int64_t group_halves(const Adapter& a, const ModelConfig& c, const SiteLayout& site) {
  int64_t n = 0;
  for (const SiteLinear& sl : site.linears)
    if (a.adapts(sl.linear)) n += a.rank * (site.in + linear_shape(c, sl.linear).rows);
  return (n + 7) / 8 * 8;
}

size_t align256(uint64_t n) {
  return static_cast<size_t>((n + 255) / 256 * 256);
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
  return p;
}

// The merger's buffers: the largest temporary matrix (a targeted linear in fp16 or, from a
// decodebench file, in the model's scheme: never larger than fp16 plus alignment), and the
// largest A and B (elements).
struct MergeSizes {
  uint64_t base = 0;
  uint64_t a = 0, b = 0;
};

MergeSizes merge_sizes(const WeightSource& ws) {
  const ModelConfig& c = ws.config();
  const QuantConfig& q = c.quant;
  const Adapter& a = *ws.adapter();
  MergeSizes z;
  for (Linear l : a.targets) {
    const MatShape s = linear_shape(c, l);
    const MatrixBytes f = matrix_bytes(s.rows, s.cols, Scheme::fp16, 0, false);
    const MatrixBytes k = matrix_bytes(s.rows, s.cols, q.scheme, q.scheme == Scheme::int4 ? q.group_size : 0,
                                       q.scheme == Scheme::int4 && q.zero_point);
    z.base = std::max<uint64_t>(
        {z.base, align256(f.weights), align256(k.weights) + align256(k.scales) + align256(k.zeros)});
    z.a = std::max<uint64_t>(z.a, a.rank * s.cols);
    z.b = std::max<uint64_t>(z.b, s.rows * a.rank);
  }
  return z;
}

bool merged_adapter(const WeightSource& ws) {
  return ws.adapter() && ws.adapter()->mode == AdapterMode::merged;
}

}  // namespace

LoraBytes lora_bytes(const WeightSource& ws) {
  LoraBytes b;
  const Adapter* a = ws.adapter();
  if (!a) return b;
  if (a->mode == AdapterMode::merged) {
    b.load = LoraMerger::load_bytes(ws);
    return b;
  }
  const ModelConfig& c = ws.config();
  int64_t halves = 0;
  for (const SiteLayout& site : lora_sites(c)) halves += group_halves(*a, c, site);
  b.weights = 2ull * halves * c.num_hidden_layers;
  b.scratch = lora_scratch_bytes(c, a->rank);
  return b;
}

uint64_t lora_scratch_bytes(const ModelConfig& c, int64_t rank) {
  if (rank == 0) return 0;
  int64_t max_rows = 0;
  for (const SiteLayout& site : lora_sites(c)) max_rows = std::max(max_rows, site.rows);
  return 2ull * c.hidden_size + 4ull * kLoraMaxSegments * rank + 4ull * max_rows;
}

int64_t external_lora_rank(const WeightSource& ws) {
  const Adapter* a = ws.adapter();
  return a && a->mode == AdapterMode::external ? a->rank : 0;
}

// ---------------------------------------------------------------------------- merged mode

LoraMerger::LoraMerger(const WeightSource& ws, cudaStream_t s) : s_(s) {
  if (!merged_adapter(ws)) return;
  adapter_ = ws.adapter();
  const MergeSizes z = merge_sizes(ws);
  base_.reset(device_alloc(z.base));
  a_.reset(device_alloc(2 * z.a));
  b_.reset(device_alloc(2 * z.b));
}

uint64_t LoraMerger::load_bytes(const WeightSource& ws) {
  if (!merged_adapter(ws)) return 0;
  const MergeSizes z = merge_sizes(ws);
  return z.base + 2 * (z.a + z.b);
}

bool LoraMerger::merges(const Origin& o) const {
  return adapter_ && adapter_->find(o.layer, o.linear) != nullptr;
}

void LoraMerger::merge(const Origin& o, const DeviceMatrix& dst, RowMap map,
                       const std::function<void(const DeviceMatrix& base)>& fill_base) {
  const LoraPair* p = adapter_ ? adapter_->find(o.layer, o.linear) : nullptr;
  if (!p) fail("LoraMerger: {} is not a target of the adapter", o.name);
  const int64_t rows = o.shape.at(0), cols = o.shape.at(1);
  CUDA_CHECK(cudaStreamSynchronize(s_));  // the previous merge is done with the buffers
  // Exact: the adapter's values are fp16-rounded (adapter.h).
  host_a_.resize(p->a.size());
  host_b_.resize(p->b.size());
  for (size_t i = 0; i < p->a.size(); ++i) host_a_[i] = f32_to_f16(p->a[i]);
  for (size_t i = 0; i < p->b.size(); ++i) host_b_[i] = f32_to_f16(p->b[i]);
  CUDA_CHECK(cudaMemcpyAsync(a_.get(), host_a_.data(), 2 * host_a_.size(), cudaMemcpyHostToDevice, s_));
  CUDA_CHECK(cudaMemcpyAsync(b_.get(), host_b_.data(), 2 * host_b_.size(), cudaMemcpyHostToDevice, s_));

  DeviceMatrix base;  // fp16 unless the file holds the weights quantized
  base.rows = rows;
  base.cols = cols;
  if (o.kind == OriginKind::quantized) {  // merged into the dequantized stored values, as host_matrix does
    base.scheme = dst.scheme;
    base.group_size = dst.group_size;
    base.zero_point = dst.zero_point;
  }
  const MatrixBytes mb = matrix_bytes(rows, cols, base.scheme, base.group_size, base.zero_point);
  uint8_t* temp = static_cast<uint8_t*>(base_.get());
  base.qweight = temp;
  if (mb.scales) base.scales = reinterpret_cast<__half*>(temp + align256(mb.weights));
  if (mb.zeros) base.zeros = temp + align256(mb.weights) + align256(mb.scales);
  fill_base(base);
  quantize_merged(dst, map,
                  MergeSource{base, static_cast<const __half*>(a_.get()),
                              static_cast<const __half*>(b_.get()), adapter_->rank, adapter_->scale_f()},
                  s_);
}

// ---------------------------------------------------------------------------- external mode

std::vector<std::array<LoraGroup, 4>> upload_external_lora(const WeightSource& ws,
                                                           const std::function<void*(size_t)>& alloc,
                                                           cudaStream_t s) {
  std::vector<std::array<LoraGroup, 4>> groups;
  const Adapter* a = ws.adapter();
  if (!a || a->mode != AdapterMode::external) return groups;
  const ModelConfig& c = ws.config();
  const std::array<SiteLayout, 4> sites = lora_sites(c);
  const int rank = static_cast<int>(a->rank);
  int64_t halves = 0;
  for (const SiteLayout& site : sites) halves += group_halves(*a, c, site);
  halves *= c.num_hidden_layers;
  auto* dev = static_cast<__half*>(alloc(2ull * halves));  // every group's A and B

  // Fill the host image of `dev` group by group, then upload it once. Exact: the adapter's
  // values are fp16-rounded (adapter.h).
  std::vector<uint16_t> host(static_cast<size_t>(halves), 0);
  int64_t start = 0;
  groups.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (size_t si = 0; si < sites.size(); ++si) {
      const SiteLayout& site = sites[si];
      LoraGroup& g = groups[l][si];
      for (const SiteLinear& sl : site.linears) g.targets += a->adapts(sl.linear) ? 1 : 0;
      if (g.targets == 0) continue;
      g.in = site.in;
      g.rank = rank;
      g.scale = a->scale_f();
      g.a = dev + start;
      g.segments = static_cast<int>(site.linears.size());
      int64_t b_at = start + static_cast<int64_t>(g.targets) * rank * site.in;
      int slot = 0;
      for (size_t j = 0; j < site.linears.size(); ++j) {
        const SiteLinear& sl = site.linears[j];
        LoraSegment& seg = g.seg[j];
        seg.offset = sl.offset;
        seg.stride = sl.stride;
        seg.rows = linear_shape(c, sl.linear).rows;
        const LoraPair* p = a->find(l, sl.linear);
        if (!p) continue;  // not adapted: b stays null, its delta rows 0
        uint16_t* ha = host.data() + start + static_cast<int64_t>(slot) * rank * site.in;
        for (size_t i = 0; i < p->a.size(); ++i) ha[i] = f32_to_f16(p->a[i]);
        for (size_t i = 0; i < p->b.size(); ++i) host[b_at + i] = f32_to_f16(p->b[i]);
        seg.b = dev + b_at;
        seg.slot = slot++;
        b_at += seg.rows * rank;
      }
      start += group_halves(*a, c, site);
    }
  }
  CUDA_CHECK(cudaMemcpyAsync(dev, host.data(), 2 * host.size(), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaStreamSynchronize(s));  // `host` lives on this stack frame
  return groups;
}

void Engine::setup_lora() {
  const int64_t rank = weights_->lora_rank();
  if (rank == 0) return;
  auto alloc = [&](size_t bytes) {
    void* p = device_alloc(bytes);
    allocations_.push_back(p);
    return p;
  };
  int64_t max_rows = 0;
  for (const SiteLayout& site : lora_sites(c_)) max_rows = std::max(max_rows, site.rows);
  lora_ = std::make_unique<Lora>();
  lora_->xnorm = static_cast<__half*>(alloc(2 * c_.hidden_size));
  auto* t = static_cast<float*>(alloc(4ull * kLoraMaxSegments * rank));  // [3 rank]: q, k, v at most
  auto* delta = static_cast<float*>(alloc(4ull * max_rows));             // [largest fused rows]
  // The weights' groups, with this engine's scratch (lora_scratch_bytes counts it).
  lora_->groups = weights_->lora_groups();
  for (std::array<LoraGroup, 4>& layer : lora_->groups)
    for (LoraGroup& g : layer) {
      if (g.targets == 0) continue;
      g.t = t;
      g.delta = delta;
    }
}

const float* Engine::lora_delta(int64_t layer, LoraSite site, const __half* x) {
  if (!lora_) return nullptr;
  LoraGroup g = lora_->groups[layer][static_cast<size_t>(site)];
  if (g.targets == 0) return nullptr;
  g.x = x;
  lora_apply(g, stream_);
  return g.delta;
}

const float* Engine::lora_delta(int64_t layer, LoraSite site, const float* resid, const __half* resid_h,
                                const __half* norm_w, const unsigned long long* sumsq) {
  if (!lora_ || lora_->groups[layer][static_cast<size_t>(site)].targets == 0) return nullptr;
  if (sumsq && c_.hidden_size % 8 == 0) {
    // The shrink normalizes the residual itself, from the statistics the GEMVs hand on, with
    // the GEMV's arithmetic: one kernel fewer per site (measured: each added small kernel
    // costs ~5 us of a mostly idle GPU).
    LoraGroup g = lora_->groups[layer][static_cast<size_t>(site)];
    g.resid = resid;
    g.resid_h = resid_h;
    g.norm_w = norm_w;
    g.sumsq = sumsq;
    g.eps = static_cast<float>(c_.rms_norm_eps);
    lora_apply(g, stream_);
    return g.delta;
  }
  // Without statistics (the cuBLAS paths) the low-rank path reads the normalized vector from
  // memory, written by their RMSNorm kernel.
  rmsnorm(resid, norm_w, static_cast<float>(c_.rms_norm_eps), c_.hidden_size, lora_->xnorm, stream_);
  return lora_delta(layer, site, lora_->xnorm);
}

}  // namespace db::cuda
