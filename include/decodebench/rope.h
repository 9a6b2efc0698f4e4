// Rotary position embedding tables, computed once on the host in double precision and
// shared by every backend, so the CPU reference and the GPU rotate by identical angles.
// HF's form: inv_freq[i] = theta^(-2i/d), llama3 rope_scaling applied to inv_freq, and the
// rotate_half pairing (i, i + d/2).
#pragma once

#include <cstdint>
#include <vector>

#include "decodebench/config.h"

namespace db {

std::vector<double> rope_inv_freq(const ModelConfig& c);

// [positions, head_dim/2] cos values followed by [positions, head_dim/2] sin values.
std::vector<float> rope_table(const ModelConfig& c, int64_t positions);

}  // namespace db
