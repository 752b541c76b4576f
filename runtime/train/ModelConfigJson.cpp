//===- ModelConfigJson.cpp - A model's training config as JSON ------------===//
#include "runtime/train/ModelConfigJson.h"

#include <nlohmann/json.hpp>

namespace attnc::train {

using nlohmann::json;

namespace {

const char *objectiveName(Objective o) {
  return o == Objective::Mlm ? "mlm" : o == Objective::Duplicate ? "duplicate" : "causal_lm";
}

} // namespace

std::string modelConfigToJson(const ModelConfig &c) {
  json params = json::array();
  for (const HeadParamInit &p : c.headParams)
    params.push_back(
        {{"name", p.name}, {"alibi", p.alibi}, {"value", p.value}, {"learned", p.learned}});
  json j = {{"vocab", c.vocab},
            {"seq", c.seq},
            {"d_model", c.dModel},
            {"heads", c.heads},
            {"d_ff", c.dff},
            {"layers", c.layers},
            {"reversible", c.reversible},
            {"ffn", c.ffn},
            {"activation", act::kindName(c.act)},
            {"ffn_chunk", c.ffnChunk},
            {"objective", objectiveName(c.objective)},
            {"shared_qk", c.sharedQk},
            {"lsh_rounds", c.lshRounds},
            {"lsh_buckets", c.lshBuckets},
            {"lsh_seed", c.lshSeed},
            {"lowrank", c.lowrank},
            {"share", c.share},
            {"lowrank_k", c.lowrankK},
            {"head_params", params},
            {"dropout", c.dropout},
            {"attention_dropout", c.attentionDropout}};
  return j.dump();
}

Expected<ModelConfig> modelConfigFromJson(const std::string &text, const std::string &where) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return makeError(where + ": not a JSON object");
  ModelConfig c;
  std::string error;
  // Reads j[key] into `out` when it has the type of `out`; else records
  // the first error (naming the field).
  auto get = [&](const char *key, auto &out) {
    using T = std::decay_t<decltype(out)>;
    if (!error.empty())
      return;
    if (!j.contains(key)) {
      error = where + "." + key + ": missing";
      return;
    }
    const json &v = j[key];
    bool ok = std::is_same_v<T, std::string> ? v.is_string()
              : std::is_same_v<T, bool>      ? v.is_boolean()
              : std::is_floating_point_v<T>  ? v.is_number()
                                             : v.is_number_integer();
    if (!ok) {
      error = where + "." + key + ": unexpected value " + v.dump();
      return;
    }
    out = v.get<T>();
  };
  std::string act, objective;
  get("vocab", c.vocab), get("seq", c.seq), get("d_model", c.dModel), get("heads", c.heads);
  get("d_ff", c.dff), get("layers", c.layers), get("reversible", c.reversible);
  get("ffn", c.ffn), get("activation", act), get("ffn_chunk", c.ffnChunk);
  get("objective", objective), get("shared_qk", c.sharedQk), get("lsh_rounds", c.lshRounds);
  get("lsh_buckets", c.lshBuckets), get("lsh_seed", c.lshSeed), get("lowrank", c.lowrank);
  get("share", c.share), get("lowrank_k", c.lowrankK), get("dropout", c.dropout);
  get("attention_dropout", c.attentionDropout);
  if (!error.empty())
    return makeError(error);
  if (j.contains("head_params") && j["head_params"].is_array())
    for (const json &p : j["head_params"]) {
      if (!p.is_object() || !p.contains("name") || !p["name"].is_string() || !p.contains("value") ||
          !p["value"].is_number())
        return makeError(where + ".head_params: each needs a name and a value");
      c.headParams.push_back({p["name"].get<std::string>(), p.value("alibi", false),
                              p["value"].get<float>(), p.value("learned", true)});
    }
  if (act != "gelu" && act != "relu" && act != "silu")
    return makeError(where + ".activation: expected gelu, relu or silu, found '" + act + "'");
  c.act = act == "relu" ? Activation::Relu : act == "silu" ? Activation::Silu : Activation::Gelu;
  if (objective != "causal_lm" && objective != "mlm" && objective != "duplicate")
    return makeError(where + ".objective: expected causal_lm, mlm or duplicate, found '" +
                     objective + "'");
  c.objective = objective == "mlm"         ? Objective::Mlm
                : objective == "duplicate" ? Objective::Duplicate
                                           : Objective::CausalLm;
  if (c.vocab <= 0 || c.seq <= 0 || c.dModel <= 0 || c.heads <= 0 || c.dModel % c.heads ||
      c.dff <= 0 || c.layers <= 0)
    return makeError(where + ": the model's dimensions are not positive or heads does not "
                             "divide d_model");
  return c;
}

} // namespace attnc::train
