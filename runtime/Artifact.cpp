//===- Artifact.cpp - Load and run an attnc artifact directory ------------===//
#include "runtime/Artifact.h"

#include "runtime/CudaAttention.h"
#include "runtime/KernelHeaders.h"
#include "runtime/CudaDriver.h"
#include "runtime/FileSystem.h"
#include "runtime/KernelCache.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <iostream>

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
  if (!kernels->is_array())
    return makeError(path + ": kernels: expected an array");
  if (m.source.find('/') != std::string::npos || m.source.empty())
    return makeError(path + ": source: expected a file name in the artifact, found '" + m.source +
                     "'");
  for (size_t i = 0; i < kernels->size(); ++i) {
    const json &k = (*kernels)[i];
    std::string where = "kernels[" + std::to_string(i) + "]";
    ManifestKernel mk;
    KernelDesc &d = mk.desc;
    std::string kind, source, share;
    double scale = 0;
    if (auto qk = k.find("shared_qk"); qk != k.end() && qk->is_boolean())
      d.sharedQk = qk->get<bool>();
    if (auto p = k.find("dropout"); p != k.end()) {
      if (!p->is_number() || p->get<double>() < 0 || p->get<double>() >= 1)
        return makeError(path + ": " + where + ".dropout: expected a number in [0, 1)");
      d.dropout = float(p->get<double>());
    }
    if (auto it = k.find("lsh"); it != k.end()) {
      const json *lsh = &*it;
      KernelDesc::Lsh l;
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
      l.numBuckets = int(nb), l.rounds = int(rounds), l.chunk = int(chunk);
      l.before = int(before), l.after = int(after), l.seed = uint64_t(seed);
      d.lsh = l;
    }
    int64_t headDim = 0, numParams = 0;
    r.get(k, where, "name", d.name);
    r.get(k, where, "kind", kind);
    r.get(k, where, "dtype", mk.dtype);
    r.get(k, where, "head_dim", headDim);
    r.get(k, where, "causal", d.causal);
    r.get(k, where, "key_padding", d.keyPadding);
    r.get(k, where, "num_params", numParams);
    r.get(k, where, "kv_source", source);
    r.get(k, where, "share", share);
    r.get(k, where, "scale", scale);
    r.get(k, where, "function", mk.function);
    r.get(k, where, "lowrank_k", mk.lowrankK);
    r.get(k, where, "max_seq", mk.maxSeq);
    if (const json *tile = r.field(k, where, "tile")) {
      int64_t bq = 0, bkv = 0, warps = 0, smem = 0;
      r.get(*tile, where + ".tile", "block_q", bq);
      r.get(*tile, where + ".tile", "block_kv", bkv);
      r.get(*tile, where + ".tile", "warps", warps);
      r.get(k, where, "smem_bytes", smem);
      d.blockQ = int(bq), d.blockKv = int(bkv), d.warps = int(warps), d.smemBytes = int(smem);
    }
    if (const json *entries = r.field(k, where, "entry_points")) {
      if (!entries->is_array())
        return makeError(path + ": " + where + ".entry_points: expected an array");
      for (const json &e : *entries) {
        if (!e.is_string())
          return makeError(path + ": " + where + ".entry_points: expected strings");
        d.entryPoints.push_back(e.get<std::string>());
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
        decl.value = float(value);
        mk.params.push_back(decl);
      }
    }
    if (!r.error.empty())
      return makeError(r.error);
    if (kind != "forward" && kind != "backward")
      return makeError(path + ": " + where + ".kind: expected forward or backward, found '" + kind +
                       "'");
    if (source != "direct" && source != "lowrank" && source != "lsh")
      return makeError(path + ": " + where +
                       ".kv_source: expected direct, lowrank or lsh, found '" + source + "'");
    if ((source == "lsh") != bool(d.lsh))
      return makeError(path + ": " + where + ": kv_source lsh needs an 'lsh' object, and only it");
    if (headDim < 1 || headDim > 1024 || d.blockQ < 1 || d.blockKv < 1 || !(scale > 0) ||
        numParams != int64_t(mk.params.size()))
      return makeError(path + ": " + where + ": inconsistent head_dim, tile, scale or params");
    d.backward = kind == "backward";
    d.headDim = int(headDim);
    d.numParams = int(numParams);
    d.lowrank = source == "lowrank";
    d.share = share;
    d.scale = float(scale);
    m.kernels.push_back(std::move(mk));
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
      mm.configJson = config->dump();
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

Status runArtifactAttention(const ArtifactRunOptions &opt) {
  std::string manifestPath = opt.dir + "/manifest.json";
  Expected<Manifest> manifest = loadManifest(opt.dir);
  if (!manifest)
    return manifest.takeError();
  if (opt.target != manifest->target)
    return makeError(opt.dir + " was compiled for target " + manifest->target + ", not " +
                     opt.target + "; recompile with attnc compile --target " + opt.target);
  if (manifest->target == "cuda") {
    if (Status driver = cuda::Driver::available(); !driver)
      return makeError("target cuda: " + driver.error());
    Expected<cuda::DeviceInfo> dev = cuda::queryDevice(0);
    if (!dev)
      return dev.takeError();
    Expected<GpuArch> want = parseGpuArch(manifest->arch);
    if (!want)
      return makeError(manifestPath + ": arch: " + want.error());
    if (dev->ccMajor * 10 + dev->ccMinor < want->sm)
      return makeError(opt.dir + " was compiled for " + manifest->arch + "; this GPU is " +
                       dev->describe() + ": recompile with --arch " + dev->arch());
  } else if (manifest->target != "cpu") {
    return makeError(manifestPath + ": target: expected cpu or cuda, found '" + manifest->target +
                     "'");
  }
  // The forward kernel, and the backward of the same function.
  const ManifestKernel *fwd = nullptr, *bwd = nullptr;
  std::string names;
  for (const ManifestKernel &k : manifest->kernels)
    if (!k.desc.backward) {
      names += (names.empty() ? "" : ", ") + k.desc.name;
      if (!fwd && (opt.kernel.empty() || k.desc.name == opt.kernel))
        fwd = &k;
    }
  if (!fwd)
    return makeError(opt.kernel.empty() ? manifestPath + " has no forward kernel"
                                        : "no forward kernel '" + opt.kernel + "' in " +
                                              manifestPath + " (it has: " + names + ")");
  for (const ManifestKernel &k : manifest->kernels)
    if (k.desc.backward && k.function == fwd->function)
      bwd = &k;
  if (!opt.grad.empty() && !bwd)
    return makeError(manifestPath + ": kernel " + fwd->desc.name + " has no backward kernel");

  AttentionSignature sig;
  sig.name = fwd->desc.name;
  sig.lowrank = fwd->desc.lowrank;
  sig.share = fwd->desc.share;
  sig.k = fwd->lowrankK;
  sig.keyPadding = fwd->desc.keyPadding;
  sig.params = fwd->params;
  sig.sharedQk = fwd->desc.sharedQk;
  if (fwd->desc.lsh) {
    sig.lshRounds = fwd->desc.lsh->rounds;
    sig.lshBuckets = fwd->desc.lsh->numBuckets;
    sig.lshSeed = fwd->desc.lsh->seed;
  }
  Expected<std::unique_ptr<AttentionIO>> io =
      loadAttentionIO(opt.inputs, opt.weights, opt.grad, sig, opt.seed);
  if (!io)
    return io.takeError();
  if ((*io)->D != fwd->desc.headDim)
    return makeError(opt.inputs + ": tensor 'q' has head dim " + std::to_string((*io)->D) +
                     " but " + opt.dir + " was compiled for head dim " +
                     std::to_string(fwd->desc.headDim));
  if (sig.lowrank && (*io)->nmax > fwd->maxSeq)
    return makeError("E covers " + std::to_string((*io)->nmax) + " positions but " + opt.dir +
                     " was compiled for at most " + std::to_string(fwd->maxSeq));

  Expected<std::string> source = fs::readFile(opt.dir + "/" + manifest->source);
  if (!source)
    return source.takeError();
  auto t0 = std::chrono::steady_clock::now();
  std::optional<KernelDesc> bwdDesc;
  if (bwd && !opt.grad.empty())
    bwdDesc = bwd->desc;
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  // Compile and run on the target; `timing` describes where the time went.
  Expected<AttentionOutputs> result = makeError("no result");
  std::string timing;
  if (manifest->target == "cuda") {
    Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cuda);
    if (!dirs)
      return dirs.takeError();
    NvrtcCompiler nvrtc(&KernelCache::processDefault());
    Expected<CudaAttention> kernels = CudaAttention::compile(*source, manifest->arch, fwd->dtype,
                                                             fwd->desc, bwdDesc, *dirs, nvrtc);
    if (!kernels)
      return kernels.takeError();
    auto t1 = std::chrono::steady_clock::now();
    result = kernels->run((*io)->inputs);
    timing = "on the GPU: loaded in " + std::to_string(int(ms(t0, t1))) + " ms; kernels forward " +
             std::to_string(kernels->forwardMs()) + " ms, backward " +
             std::to_string(kernels->backwardMs()) + " ms";
  } else {
    Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cpu);
    if (!dirs)
      return dirs.takeError();
    HostCompiler compiler(&KernelCache::processDefault());
    Expected<CpuAttention> kernels =
        CpuAttention::compile(*source, fwd->desc, bwdDesc, *dirs, compiler);
    if (!kernels)
      return kernels.takeError();
    auto t1 = std::chrono::steady_clock::now();
    result = kernels->run((*io)->inputs);
    timing = std::string("kernels ") + (kernels->fromCache() ? "from cache" : "compiled") + " in " +
             std::to_string(int(ms(t0, t1))) + " ms, ran in " +
             std::to_string(ms(t1, std::chrono::steady_clock::now())) + " ms";
  }
  if (!result)
    return result.takeError();
  if (Status s = writeAttentionOutputs(opt.output, std::move(*result), **io, sig); !s)
    return s;
  std::cerr << "attnc: " << fwd->desc.name << " from " << opt.dir << ": " << timing << "; wrote "
            << opt.output << "\n";
  return {};
}

} // namespace attnc
