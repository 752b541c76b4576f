//===- Manifest.cpp - The artifact's manifest.json ------------------------===//
#include "codegen/Manifest.h"

#include "llvm/Support/JSON.h"

namespace attnc::codegen {

void writeManifest(const ManifestInfo &info, llvm::raw_ostream &os) {
  llvm::json::Array kernels;
  for (const KernelInfo &k : info.kernels) {
    llvm::json::Array entries;
    for (const std::string &e : k.entryPoints)
      entries.push_back(e);
    llvm::json::Array params;
    for (const KernelInfo::Param &p : k.params)
      params.push_back(llvm::json::Object{{"name", p.name},
                                          {"init", p.alibi ? "alibi" : "constant"},
                                          {"value", p.value},
                                          {"learned", p.learned}});
    llvm::json::Object kernel{
        {"name", k.name},
        {"kind", k.backward ? "backward" : "forward"},
        {"dtype", k.dtype},
        {"head_dim", k.headDim},
        {"tile", llvm::json::Object{{"block_q", k.blockQ},
                                    {"block_kv", k.blockKv},
                                    {"warps", k.warps},
                                    {"stages", k.stages}}},
        {"causal", k.causal},
        {"key_padding", k.keyPadding},
        {"deterministic", k.deterministic},
        {"num_params", k.numParams},
        {"kv_source", k.kvSource},
        {"share", k.share},
        {"scale", k.scale},
        {"smem_bytes", k.smemBytes},
        {"entry_points", std::move(entries)},
        {"function", k.function},
        {"lowrank_k", k.lowrankK},
        {"max_seq", k.maxSeq},
        {"params", std::move(params)},
        {"shared_qk", k.sharedQk},
    };
    if (k.selfScore)
      kernel["self_score"] = *k.selfScore;
    if (k.dropout > 0)
      kernel["dropout"] = k.dropout;
    if (k.lsh)
      kernel["lsh"] = llvm::json::Object{
          {"num_buckets", k.lsh->numBuckets}, {"rounds", k.lsh->rounds}, {"chunk", k.lsh->chunk},
          {"before", k.lsh->before},          {"after", k.lsh->after},   {"seed", k.lsh->seed}};
    kernels.push_back(std::move(kernel));
  }
  llvm::json::Object root{{"format_version", kManifestVersion},
                          {"generator", "attnc"},
                          {"spec_hash", info.specHash},
                          {"target", info.target},
                          {"arch", info.arch},
                          {"source", info.source},
                          {"kernels", std::move(kernels)}};
  if (!info.models.empty()) {
    llvm::json::Array models;
    for (const std::string &m : info.models)
      if (llvm::Expected<llvm::json::Value> v = llvm::json::parse(m))
        models.push_back(std::move(*v));
      else
        llvm::consumeError(v.takeError()); // the driver wrote it: cannot happen
    root["models"] = std::move(models);
  }
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
}

} // namespace attnc::codegen
