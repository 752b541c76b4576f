//===- Manifest.cpp - The artifact manifest: one schema, written and read here ===//
#include "runtime/Manifest.h"

#include "runtime/FileSystem.h"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace attnc {

namespace {

using nlohmann::json;

/// Field access with errors that say where: "kernels[0].tile.block_q".
class Reader {
public:
  Reader(const std::string &path) : path(path) {}
  std::string error;

  const json *field(const json &obj, const std::string &where, const char *key) {
    if (!error.empty())
      return nullptr;
    if (!obj.is_object() || !obj.contains(key)) {
      error = path + ": " + where + (where.empty() ? "" : ".") + key + ": missing";
      return nullptr;
    }
    return &obj[key];
  }
  template <typename T>
  bool get(const json &obj, const std::string &where, const char *key, T &out) {
    const json *v = field(obj, where, key);
    if (!v)
      return false;
    bool ok = std::is_same_v<T, std::string> ? v->is_string()
              : std::is_same_v<T, bool>      ? v->is_boolean()
              : std::is_floating_point_v<T>  ? v->is_number()
                                             : v->is_number_integer();
    if (!ok) {
      error = path + ": " + where + (where.empty() ? "" : ".") + key + ": expected " +
              (std::is_same_v<T, std::string> ? "a string"
               : std::is_same_v<T, bool>      ? "true or false"
               : std::is_floating_point_v<T>  ? "a number"
                                              : "an integer") +
              ", found " + v->dump();
      return false;
    }
    out = v->get<T>();
    return true;
  }

private:
  std::string path;
};

/// A "kernels" array (`at` names it in errors: "kernels",
/// "host_kernels.kernels").
Expected<std::vector<ManifestKernel>> parseKernels(const json &kernels, const std::string &at,
                                                   const std::string &path) {
  if (!kernels.is_array())
    return makeError(path + ": " + at + ": expected an array");
  Reader r(path);
  std::vector<ManifestKernel> out;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const json &k = kernels[i];
    std::string where = at + "[" + std::to_string(i) + "]";
    ManifestKernel mk;
    std::string kind;
    if (auto qk = k.find("shared_qk"); qk != k.end() && qk->is_boolean())
      mk.sharedQk = qk->get<bool>();
    if (auto det = k.find("deterministic"); det != k.end() && det->is_boolean())
      mk.deterministic = det->get<bool>();
    if (auto self = k.find("self_score"); self != k.end()) {
      if (!self->is_number())
        return makeError(path + ": " + where + ".self_score: expected a number");
      mk.selfScore = self->get<double>();
    }
    if (auto p = k.find("dropout"); p != k.end()) {
      if (!p->is_number() || p->get<double>() < 0 || p->get<double>() >= 1)
        return makeError(path + ": " + where + ".dropout: expected a number in [0, 1)");
      mk.dropout = p->get<double>();
    }
    if (auto it = k.find("lsh"); it != k.end()) {
      const json *lsh = &*it;
      ManifestKernel::Lsh l;
      int64_t nb = 0, rounds = 0, chunk = 0, before = 0, after = 0, seed = 0;
      std::string lw = where + ".lsh";
      r.get(*lsh, lw, "num_buckets", nb);
      r.get(*lsh, lw, "rounds", rounds);
      r.get(*lsh, lw, "chunk", chunk);
      r.get(*lsh, lw, "before", before);
      r.get(*lsh, lw, "after", after);
      r.get(*lsh, lw, "seed", seed);
      if (r.error.empty() && (nb < 2 || nb % 2 || nb > 65536 || rounds < 1 || rounds > 64 ||
                              chunk < 1 || before < 0 || after < 0 || seed < 0))
        return makeError(path + ": " + lw + ": inconsistent buckets, rounds, chunk or window");
      l.numBuckets = nb, l.rounds = rounds, l.chunk = chunk;
      l.before = before, l.after = after, l.seed = seed;
      mk.lsh = l;
    }
    r.get(k, where, "name", mk.name);
    r.get(k, where, "kind", kind);
    r.get(k, where, "dtype", mk.dtype);
    r.get(k, where, "head_dim", mk.headDim);
    r.get(k, where, "causal", mk.causal);
    r.get(k, where, "key_padding", mk.keyPadding);
    r.get(k, where, "num_params", mk.numParams);
    r.get(k, where, "kv_source", mk.kvSource);
    r.get(k, where, "share", mk.share);
    r.get(k, where, "scale", mk.scale);
    r.get(k, where, "function", mk.function);
    r.get(k, where, "lowrank_k", mk.lowrankK);
    r.get(k, where, "max_seq", mk.maxSeq);
    if (const json *tile = r.field(k, where, "tile")) {
      r.get(*tile, where + ".tile", "block_q", mk.blockQ);
      r.get(*tile, where + ".tile", "block_kv", mk.blockKv);
      r.get(*tile, where + ".tile", "warps", mk.warps);
      mk.stages = 1;
      if (tile->contains("stages"))
        r.get(*tile, where + ".tile", "stages", mk.stages);
      r.get(k, where, "smem_bytes", mk.smemBytes);
    }
    if (const json *entries = r.field(k, where, "entry_points")) {
      if (!entries->is_array())
        return makeError(path + ": " + where + ".entry_points: expected an array");
      for (const json &e : *entries) {
        if (!e.is_string())
          return makeError(path + ": " + where + ".entry_points: expected strings");
        mk.entryPoints.push_back(e.get<std::string>());
      }
    }
    if (const json *params = r.field(k, where, "params")) {
      for (size_t p = 0; params->is_array() && p < params->size(); ++p) {
        std::string pw = where + ".params[" + std::to_string(p) + "]", init;
        ParamDecl decl;
        double value = 0;
        r.get((*params)[p], pw, "name", decl.name);
        r.get((*params)[p], pw, "init", init);
        r.get((*params)[p], pw, "value", value);
        r.get((*params)[p], pw, "learned", decl.learned);
        decl.alibi = init == "alibi";
        decl.value = value;
        mk.params.push_back(decl);
      }
    }
    if (!r.error.empty())
      return makeError(r.error);
    if (kind != "forward" && kind != "backward")
      return makeError(path + ": " + where + ".kind: expected forward or backward, found '" + kind +
                       "'");
    if (mk.kvSource != "direct" && mk.kvSource != "lowrank" && mk.kvSource != "lsh")
      return makeError(path + ": " + where +
                       ".kv_source: expected direct, lowrank or lsh, found '" + mk.kvSource + "'");
    if ((mk.kvSource == "lsh") != bool(mk.lsh))
      return makeError(path + ": " + where + ": kv_source lsh needs an 'lsh' object, and only it");
    if (mk.headDim < 1 || mk.headDim > 1024 || mk.blockQ < 1 || mk.blockKv < 1 || !(mk.scale > 0) ||
        mk.numParams != int64_t(mk.params.size()))
      return makeError(path + ": " + where + ": inconsistent head_dim, tile, scale or params");
    mk.backward = kind == "backward";
    out.push_back(std::move(mk));
  }
  return out;
}

/// A kernel source's file name in the artifact (no directories).
Status checkSourceName(const std::string &name, const std::string &at, const std::string &path) {
  if (name.find('/') != std::string::npos || name.empty())
    return makeError(path + ": " + at + ": expected a file name in the artifact, found '" + name +
                     "'");
  return {};
}

} // namespace

Expected<Manifest> parseManifest(const std::string &text, const std::string &path) {
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object())
    return makeError(path + ": not a JSON object");
  Manifest m;
  Reader r(path);
  if (!r.get(root, "", "format_version", m.formatVersion))
    return makeError(r.error);
  if (m.formatVersion != kManifestFormatVersion)
    return makeError(path + ": format_version " + std::to_string(m.formatVersion) + " is not the " +
                     std::to_string(kManifestFormatVersion) +
                     " this runtime reads; recompile the spec with this attnc");
  r.get(root, "", "target", m.target);
  r.get(root, "", "arch", m.arch);
  r.get(root, "", "source", m.source);
  r.get(root, "", "spec_hash", m.specHash);
  const json *kernels = r.field(root, "", "kernels");
  if (!r.error.empty())
    return makeError(r.error);
  if (Status st = checkSourceName(m.source, "source", path); !st)
    return st.takeError();
  Expected<std::vector<ManifestKernel>> parsed = parseKernels(*kernels, "kernels", path);
  if (!parsed)
    return parsed.takeError();
  m.kernels = std::move(*parsed);
  if (auto host = root.find("host_kernels"); host != root.end()) {
    r.get(*host, "host_kernels", "source", m.hostSource);
    const json *hostKernels = r.field(*host, "host_kernels", "kernels");
    if (!r.error.empty())
      return makeError(r.error);
    if (Status st = checkSourceName(m.hostSource, "host_kernels.source", path); !st)
      return st.takeError();
    Expected<std::vector<ManifestKernel>> hk =
        parseKernels(*hostKernels, "host_kernels.kernels", path);
    if (!hk)
      return hk.takeError();
    m.hostKernels = std::move(*hk);
  }
  if (root.contains("models")) {
    const json &models = root["models"];
    if (!models.is_array())
      return makeError(path + ": models: expected an array");
    for (size_t i = 0; i < models.size(); ++i) {
      const json &e = models[i];
      const std::string where = "models[" + std::to_string(i) + "]";
      ManifestModel mm;
      r.get(e, where, "name", mm.name);
      r.get(e, where, "batch", mm.batch);
      r.get(e, where, "step_source", mm.stepSource);
      r.get(e, where, "step_symbol", mm.stepSymbol);
      r.get(e, where, "attention_function", mm.attentionFunction);
      if (e.contains("step_kernels"))
        r.get(e, where, "step_kernels", mm.stepKernels);
      if (e.contains("step_abi"))
        r.get(e, where, "step_abi", mm.stepAbi);
      r.get(e, where, "arena_bytes", mm.arenaBytes);
      r.get(e, where, "kept_bytes", mm.keptBytes);
      const json *args = r.field(e, where, "args");
      const json *grads = r.field(e, where, "grad_args");
      const json *config = r.field(e, where, "config");
      if (!r.error.empty())
        return makeError(r.error);
      if (!args->is_array() || !grads->is_array() || !config->is_object())
        return makeError(path + ": " + where +
                         ": args and grad_args must be arrays, config an object");
      for (const json &a : *args) {
        if (!a.is_string())
          return makeError(path + ": " + where + ".args: expected strings, found " + a.dump());
        mm.args.push_back(a.get<std::string>());
      }
      for (const json &g : *grads) {
        if (!g.is_number_integer() || g.get<int64_t>() < 0 ||
            g.get<int64_t>() >= int64_t(mm.args.size()))
          return makeError(path + ": " + where + ".grad_args: " + g.dump() +
                           " is not an argument number");
        mm.gradArgs.push_back(g.get<int>());
      }
      if (mm.batch <= 0 || mm.arenaBytes < 0)
        return makeError(path + ": " + where +
                         ": batch must be positive, arena_bytes not negative");
      if (e.contains("inference")) {
        const std::string at = where + ".inference";
        const json &inf = e["inference"];
        if (!inf.is_object())
          return makeError(path + ": " + at + ": expected an object");
        r.get(inf, at, "source", mm.inferSource);
        r.get(inf, at, "symbol", mm.inferSymbol);
        r.get(inf, at, "arena_bytes", mm.inferArenaBytes);
        r.get(inf, at, "batch", mm.inferBatch);
        const json *inferArgs = r.field(inf, at, "args");
        if (!r.error.empty())
          return makeError(r.error);
        if (!inferArgs->is_array())
          return makeError(path + ": " + at + ".args: expected an array");
        for (const json &a : *inferArgs) {
          if (!a.is_string())
            return makeError(path + ": " + at + ".args: expected strings, found " + a.dump());
          mm.inferArgs.push_back(a.get<std::string>());
        }
        if (mm.inferBatch <= 0 || mm.inferArenaBytes < 0)
          return makeError(path + ": " + at + ": batch must be positive, arena_bytes not negative");
      }
      mm.configJson = config->dump();
      if (auto train = e.find("train"); train != e.end()) {
        if (!train->is_object())
          return makeError(path + ": " + where + ".train: expected an object");
        mm.trainJson = train->dump();
      }
      m.models.push_back(std::move(mm));
    }
  }
  return m;
}

Expected<Manifest> loadManifest(const std::string &dir) {
  const std::string path = dir + "/manifest.json";
  Expected<std::string> text = fs::readFile(path);
  if (!text)
    return makeError("'" + dir + "' is not an attnc artifact: " + text.error());
  return parseManifest(*text, path);
}

namespace {

/// manifest.json's own printer: objects with sorted keys (nlohmann's map
/// order), two-space indents, doubles as %.17g so that every bit survives
/// (0.2 is written 0.20000000000000001).
void print(const json &v, std::string &out, int indent) {
  const std::string pad(size_t(indent) * 2, ' '), inner(size_t(indent + 1) * 2, ' ');
  if (v.is_object()) {
    if (v.empty()) {
      out += "{}";
      return;
    }
    out += "{\n";
    size_t i = 0;
    for (auto it = v.begin(); it != v.end(); ++it, ++i) {
      out += inner + json(it.key()).dump() + ": ";
      print(it.value(), out, indent + 1);
      out += i + 1 < v.size() ? ",\n" : "\n";
    }
    out += pad + "}";
  } else if (v.is_array()) {
    if (v.empty()) {
      out += "[]";
      return;
    }
    out += "[\n";
    for (size_t i = 0; i < v.size(); ++i) {
      out += inner;
      print(v[i], out, indent + 1);
      out += i + 1 < v.size() ? ",\n" : "\n";
    }
    out += pad + "]";
  } else if (v.is_number_float()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v.get<double>());
    out += buf;
  } else {
    out += v.dump();
  }
}

json kernelJson(const ManifestKernel &k) {
  json params = json::array();
  for (const ParamDecl &p : k.params)
    params.push_back({{"name", p.name},
                      {"init", p.alibi ? "alibi" : "constant"},
                      {"value", p.value},
                      {"learned", p.learned}});
  json kernel = {
      {"name", k.name},
      {"kind", k.backward ? "backward" : "forward"},
      {"dtype", k.dtype},
      {"head_dim", k.headDim},
      {"tile",
       {{"block_q", k.blockQ}, {"block_kv", k.blockKv}, {"warps", k.warps}, {"stages", k.stages}}},
      {"causal", k.causal},
      {"key_padding", k.keyPadding},
      {"deterministic", k.deterministic},
      {"num_params", k.numParams},
      {"kv_source", k.kvSource},
      {"share", k.share},
      {"scale", k.scale},
      {"smem_bytes", k.smemBytes},
      {"entry_points", k.entryPoints},
      {"function", k.function},
      {"lowrank_k", k.lowrankK},
      {"max_seq", k.maxSeq},
      {"params", params},
      {"shared_qk", k.sharedQk},
  };
  if (k.selfScore)
    kernel["self_score"] = *k.selfScore;
  if (k.dropout > 0)
    kernel["dropout"] = k.dropout;
  if (k.lsh)
    kernel["lsh"] = {
        {"num_buckets", k.lsh->numBuckets}, {"rounds", k.lsh->rounds}, {"chunk", k.lsh->chunk},
        {"before", k.lsh->before},          {"after", k.lsh->after},   {"seed", k.lsh->seed}};
  return kernel;
}

json modelJson(const ManifestModel &m) {
  json model = {{"name", m.name},
                {"batch", m.batch},
                {"step_source", m.stepSource},
                {"step_symbol", m.stepSymbol},
                {"attention_function", m.attentionFunction},
                {"arena_bytes", m.arenaBytes},
                {"kept_bytes", m.keptBytes},
                {"args", m.args},
                {"grad_args", m.gradArgs},
                {"config", json::parse(m.configJson, nullptr, /*allow_exceptions=*/false)}};
  if (json train = json::parse(m.trainJson, nullptr, /*allow_exceptions=*/false);
      train.is_object() && !train.empty())
    model["train"] = train;
  if (!m.stepKernels.empty()) {
    model["step_kernels"] = m.stepKernels;
    model["step_abi"] = m.stepAbi;
  }
  if (!m.inferSymbol.empty())
    model["inference"] = {{"source", m.inferSource},
                          {"symbol", m.inferSymbol},
                          {"arena_bytes", m.inferArenaBytes},
                          {"batch", m.inferBatch},
                          {"args", m.inferArgs}};
  return model;
}

} // namespace

std::string writeManifest(const Manifest &m) {
  json kernels = json::array();
  for (const ManifestKernel &k : m.kernels)
    kernels.push_back(kernelJson(k));
  json root = {{"format_version", m.formatVersion},
               {"generator", "attnc"},
               {"spec_hash", m.specHash},
               {"target", m.target},
               {"arch", m.arch},
               {"source", m.source},
               {"kernels", kernels}};
  if (!m.hostKernels.empty()) {
    json host = json::array();
    for (const ManifestKernel &k : m.hostKernels)
      host.push_back(kernelJson(k));
    root["host_kernels"] = {{"source", m.hostSource}, {"kernels", host}};
  }
  if (!m.models.empty()) {
    json models = json::array();
    for (const ManifestModel &model : m.models)
      models.push_back(modelJson(model));
    root["models"] = models;
  }
  std::string out;
  print(root, out, 0);
  return out + "\n";
}

KernelDesc ManifestKernel::desc() const {
  KernelDesc d;
  d.name = name, d.backward = backward, d.headDim = int(headDim);
  d.blockQ = int(blockQ), d.blockKv = int(blockKv), d.warps = int(warps);
  d.stages = int(stages);
  d.smemBytes = int(smemBytes);
  d.causal = causal, d.keyPadding = keyPadding, d.numParams = int(numParams);
  d.lowrank = kvSource == "lowrank", d.share = share, d.sharedQk = sharedQk;
  d.lowrankK = int(lowrankK), d.maxSeq = int(maxSeq);
  if (lsh)
    d.lsh = KernelDesc::Lsh{int(lsh->numBuckets), int(lsh->rounds), int(lsh->chunk),
                            int(lsh->before),     int(lsh->after),  uint64_t(lsh->seed)};
  d.scale = float(scale), d.dropout = float(dropout);
  d.entryPoints = entryPoints;
  return d;
}

} // namespace attnc
