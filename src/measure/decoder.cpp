// The token stream every decoder is fed (see include/decodebench/decoder.h).
#include "decodebench/decoder.h"

#include "decodebench/synth.h"

namespace db {

int32_t prompt_token(int64_t index, int64_t vocab) {
  return prompt_token(0, index, vocab);
}

int32_t prompt_token(int64_t sequence, int64_t index, int64_t vocab) {
  // Sequence s hashes (s << 32) | index: sequence 0 is the batch-1 stream bit for bit.
  const uint64_t key = (static_cast<uint64_t>(sequence) << 32) | static_cast<uint64_t>(index);
  return static_cast<int32_t>(synth::mix64(0x70726f6d7074ull ^ key) % static_cast<uint64_t>(vocab));
}

}  // namespace db
