// Rotary position embedding tables (see include/decodebench/rope.h).
#include "decodebench/rope.h"

#include <cmath>

namespace db {

std::vector<double> rope_inv_freq(const ModelConfig& c) {
  const int64_t half = c.head_dim / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv[i] = 1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(c.head_dim));
  if (!c.rope_scaling.llama3) return inv;
  // Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, the band between
  // interpolated smoothly.
  const RopeScaling& s = c.rope_scaling;
  const double old_len = static_cast<double>(s.original_max_position_embeddings);
  const double low_wavelen = old_len / s.low_freq_factor;
  const double high_wavelen = old_len / s.high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2.0 * M_PI / f;
    if (wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      f /= s.factor;
      continue;
    }
    const double smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    f = (1.0 - smooth) * f / s.factor + smooth * f;
  }
  return inv;
}

std::vector<float> rope_table(const ModelConfig& c, int64_t positions) {
  const std::vector<double> inv = rope_inv_freq(c);
  const int64_t half = c.head_dim / 2;
  std::vector<float> t(static_cast<size_t>(2 * positions * half));
  for (int64_t p = 0; p < positions; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      // HF multiplies in float32: angle = float(pos) * float(inv_freq). Do the same so the
      // angles match transformers' to the last bit at every position.
      const float angle = static_cast<float>(p) * static_cast<float>(inv[i]);
      t[p * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      t[(positions + p) * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  return t;
}

}  // namespace db
