// Synthetic weights: a counter-based generator of (seed, tensor, element), computed with
// integer hashing and one correctly rounded fmaf, so the host and the device produce the
// same bits. Values are never zero (zeros hide unwritten outputs): matrices draw
// |w| uniform in [0.002, 0.0346) with a random sign (std ~0.0206, close to trained
// Llama weights); norm weights, and qwen2's q/k/v biases, draw uniform in [0.9, 1.1): a bias
// that large moves every logit, so a backend that leaves it out fails its comparison.
#pragma once

#include <cmath>
#include <string_view>

#include "decodebench/host_device.h"

namespace db::synth {

enum class Dist : int { matrix = 0, norm = 1 };

DB_HOST_DEVICE uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Tensor ids are FNV-1a hashes of the HF tensor name, so any tensor's values depend only
// on the seed and its name, never on load order.
inline uint64_t tensor_id(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

DB_HOST_DEVICE float value(uint64_t seed, uint64_t tensor, uint64_t index, Dist dist) {
  const uint64_t h = mix64(mix64(seed ^ mix64(tensor)) ^ index);
  const float u = static_cast<float>(static_cast<uint32_t>(h >> 40)) * (1.0f / 16777216.0f);  // [0,1), exact
  if (dist == Dist::norm) return fmaf(0.2f, u, 0.9f);
  const float mag = fmaf(0.0326f, u, 0.002f);
  return (h & 1u) ? -mag : mag;
}

}  // namespace db::synth
