// The run key: the config fields that make two runs the same experiment (run_key.h).
#include "decodebench/run_key.h"

#include <fmt/format.h>

#include <tuple>

namespace db {
namespace {

auto tie(const RunKey& k) {
  return std::tie(k.model, k.scheme, k.group_size, k.lm_head_scheme, k.kv_cache, k.kernel, k.graph, k.adapter,
                  k.adapter_mode, k.context, k.tokens, k.sync_per_token, k.weights, k.batch);
}

const char* on_off(bool b) {
  return b ? "on" : "off";
}

}  // namespace

bool RunKey::operator==(const RunKey& o) const {
  return tie(*this) == tie(o);
}
bool RunKey::operator<(const RunKey& o) const {
  return tie(*this) < tie(o);
}

RunKey run_key(const Result& r) {
  const RunConfig& c = r.config;
  RunKey k;
  k.model = c.model;
  k.scheme = c.scheme;
  k.group_size = c.group_size;
  k.lm_head_scheme = c.lm_head_scheme;
  k.kv_cache = c.kv_cache;
  k.kernel = c.kernel;
  k.graph = c.graph;
  k.adapter = c.adapter;
  k.adapter_mode = c.adapter_mode;
  k.context = c.context;
  k.tokens = c.tokens;
  k.sync_per_token = c.sync_per_token;
  k.weights = c.weights;
  k.batch = c.batch;
  return k;
}

std::vector<std::pair<std::string, std::string>> key_fields(const RunKey& k) {
  return {{"model", k.model},
          {"scheme", k.scheme},
          {"group_size", std::to_string(k.group_size)},
          {"lm_head_scheme", k.lm_head_scheme},
          {"kv_cache", k.kv_cache},
          {"kernel", k.kernel},
          {"graph", on_off(k.graph)},
          {"adapter", k.adapter},
          {"adapter_mode", k.adapter_mode},
          {"context", std::to_string(k.context)},
          {"tokens", std::to_string(k.tokens)},
          {"sync_per_token", on_off(k.sync_per_token)},
          {"weights", k.weights},
          {"batch", std::to_string(k.batch)}};
}

std::string to_string(const RunKey& k) {
  std::string s;
  for (const auto& [name, value] : key_fields(k))
    if ((name != "batch" || k.batch != 1) && (name != "kv_cache" || k.kv_cache != "fp16"))
      s += fmt::format("{}{}={}", s.empty() ? "" : " ", name, value.empty() ? "-" : value);
  return s;
}

const std::vector<std::string>& key_field_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& [name, value] : key_fields(RunKey{})) n.push_back(name);
    return n;
  }();
  return names;
}

std::string key_value(const RunKey& k, const std::string& field) {
  for (const auto& [name, value] : key_fields(k))
    if (name == field) return value;
  return "";
}

RunKey without_field(RunKey k, const std::string& field) {
  if (field == "model") k.model.clear();
  if (field == "scheme") k.scheme.clear();
  if (field == "group_size") k.group_size = 0;
  if (field == "lm_head_scheme") k.lm_head_scheme.clear();
  if (field == "kv_cache") k.kv_cache = "fp16";
  if (field == "kernel") k.kernel.clear();
  if (field == "graph") k.graph = false;
  if (field == "adapter") k.adapter.clear();
  if (field == "adapter_mode") k.adapter_mode.clear();
  if (field == "context") k.context = 0;
  if (field == "tokens") k.tokens = 0;
  if (field == "sync_per_token") k.sync_per_token = false;
  if (field == "weights") k.weights.clear();
  if (field == "batch") k.batch = 1;
  return k;
}

}  // namespace db
