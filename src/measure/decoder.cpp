// The token stream every decoder is fed, and the batch methods' defaults for a decoder of
// batch 1 (see include/decodebench/decoder.h).
#include "decodebench/decoder.h"

#include "decodebench/error.h"
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

namespace {

void check_sequence(const Decoder& d, int64_t s) {
  if (s < 0 || s >= d.batch()) fail("decoder: sequence {} of a batch of {}", s, d.batch());
}

}  // namespace

void Decoder::restart_batch(int64_t position, const std::vector<int32_t>& tokens) {
  if (static_cast<int64_t>(tokens.size()) != batch())
    fail("decoder: {} restart tokens for a batch of {}", tokens.size(), batch());
  if (batch() != 1) fail("decoder: batch {} without restart_batch()", batch());
  restart(position, tokens[0]);
}

std::vector<int32_t> Decoder::read_tokens() {
  if (batch() != 1) fail("decoder: batch {} without read_tokens()", batch());
  return {read_token()};
}

std::vector<int32_t> Decoder::sequence_tokens(int64_t s, int64_t n) {
  check_sequence(*this, s);
  if (batch() != 1) fail("decoder: batch {} without sequence_tokens()", batch());
  return tokens(n);
}

std::vector<float> Decoder::sequence_logits(int64_t s) {
  check_sequence(*this, s);
  if (batch() != 1) fail("decoder: batch {} without sequence_logits()", batch());
  return logits();
}

}  // namespace db
