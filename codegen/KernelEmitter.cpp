//===- KernelEmitter.cpp - CUDA and C++ translation units for kernels -----===//
#include "codegen/KernelEmitter.h"
#include "attnc/abi/LshTileModel.h"
#include "attnc/abi/TileModel.h"
#include "codegen/VariantEmitter.h"

#include "dialect/AttnDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace attnc::attn;

namespace attnc::codegen {

namespace {

const char *cudaElementType(Type t) {
  return t.isF32() ? "float" : t.isF16() ? "__half" : "__nv_bfloat16";
}

/// Fills the parts of a ManifestKernel every kernel op has (name, tile, dtype,
/// masks, parameters).
template <typename OpTy>
LogicalResult describeCommon(OpTy op, bool backward, ManifestKernel &info) {
  if (!op.getKernel())
    return op.emitOpError("has no kernel name; run attn-tile before emitting");
  TileAttr t = op.getTile();
  if (t.getBlockQ() == kAuto || t.getBlockKv() == kAuto || t.getWarps() == kAuto ||
      t.getStages() == kAuto)
    return op.emitOpError("tile config still has 'auto' fields; run attn-tile first");
  info.name = op.getKernel()->str();
  info.backward = backward;
  info.dtype = elementTypeName(op.getElementType()).str();
  info.headDim = op.getHeadDim();
  info.blockQ = t.getBlockQ();
  info.blockKv = t.getBlockKv();
  info.warps = t.getWarps();
  info.stages = t.getStages();
  info.causal = op.getCausal();
  info.keyPadding = op.getKeyPadding();
  ArrayAttr decls = op.getParamDeclsAttr();
  info.numParams = decls ? decls.size() : 0;
  info.scale = op.getScale().convertToDouble();
  if (auto func = op->template getParentOfType<func::FuncOp>())
    info.function = func.getSymName().str();
  if (decls)
    for (Attribute a : decls) {
      auto p = llvm::cast<HeadParamAttr>(a);
      info.params.push_back({p.getName().str(), p.getInit() == ParamInit::alibi,
                             p.getValue().convertToDouble(), p.getLearned()});
    }
  return success();
}

/// Dense and low-rank kernel ops.
template <typename OpTy>
LogicalResult describe(OpTy op, bool backward, Target target, ManifestKernel &info) {
  if (failed(describeCommon(op, backward, info)))
    return failure();
  info.kvSource = stringifyKvSource(op.getKvSource()).str();
  info.share = op.getShare() ? stringifyShareMode(*op.getShare()).str() : "";
  info.sharedQk = op.getSharedQk();
  if (auto self = op.getSelfScore())
    info.selfScore = self->convertToDouble();
  if (auto p = op.getDropout(); p && p->convertToDouble() > 0) {
    // Dense and low-rank kernels draw the masks (CPU and CUDA, the same
    // Philox masks; low-rank over the projected keys).
    info.dropout = p->convertToDouble();
  }
  if (Value e = op.getProjE()) {
    auto t = llvm::cast<RankedTensorType>(e.getType());
    info.lowrankK = t.getDimSize(t.getRank() - 2);
    info.maxSeq = t.getDimSize(t.getRank() - 1);
  }
  if (target == Target::Cuda) {
    attnc::tile::TileConfig c{int(info.blockQ), int(info.blockKv), int(info.warps),
                              int(info.stages)};
    int elemBytes = op.getElementType().isF32() ? 4 : 2;
    info.smemBytes = attnc::tile::smemBytes(c, int(info.headDim), elemBytes, backward);
  }
  return success();
}

/// LSH kernel ops (static shared memory only: smemBytes stays 0).
template <typename OpTy> LogicalResult describeLsh(OpTy op, bool backward, ManifestKernel &info) {
  if (failed(describeCommon(op, backward, info)))
    return failure();
  info.kvSource = "lsh";
  info.sharedQk = true;
  ManifestKernel::Lsh l;
  l.numBuckets = op.getNumBuckets();
  l.rounds = op.getRounds();
  l.chunk = op.getChunk();
  l.before = op.getBefore();
  l.after = op.getAfter();
  info.lsh = l;
  if (auto p = op.getDropout(); p && p->convertToDouble() > 0)
    info.dropout = p->convertToDouble();
  return success();
}

void emitCudaEntries(const ManifestKernel &k, StringRef variant, StringRef elt, raw_ostream &os,
                     std::vector<std::string> &entries) {
  // Dense and low-rank entry points read their tile from one macro, so a
  // runtime compiling for another GPU re-tiles them (common.cuh).
  const std::string tileMacro = "ATTNC_TILE_" + k.name;
  const std::string tmpl =
      llvm::formatv("ATTNC_FLASH_ARGS({0}, {1}, {2}, {3})", tileMacro, k.headDim, elt, variant)
          .str();
  const std::string tileThreads = "ATTNC_TILE_THREADS(" + tileMacro + ")";
  auto entry = [&](StringRef prefix, StringRef args, StringRef body) {
    std::string name = (prefix + k.name).str();
    // minBlocks = 1: without it ptxas caps registers lower and spills.
    os << "extern \"C\" __global__ void __launch_bounds__(" << tileThreads << ", 1) " << name
       << "(attnc::" << args << " a) {\n  " << body << "<" << tmpl << ">(a);\n}\n";
    entries.push_back(name);
  };
  if (k.lsh) {
    // <CHUNK, BEFORE, AFTER, D, BQ, BKV, WARPS, T, Variant>: the op's tile,
    // or a tensor-core kernel's own (LshTileModel.h), which the runtime
    // launches by the same rule.
    const attnc::tile::LshTile op{int(k.blockQ), int(k.blockKv), int(k.warps)};
    auto lshEntry = [&](StringRef prefix, StringRef fn, const attnc::tile::LshTile &t) {
      std::string name = (prefix + k.name).str();
      os << "extern \"C\" __global__ void __launch_bounds__(" << t.warps * 32 << ", 1) " << name
         << "(attnc::AttnLshArgs a) {\n  attnc::" << fn << "<"
         << llvm::formatv("{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}", k.lsh->chunk,
                          k.lsh->before, k.lsh->after, k.headDim, t.blockQ, t.blockKv, t.warps, elt,
                          variant)
         << ">(a);\n}\n";
      entries.push_back(name);
    };
    // fp16/bf16 with chunks of whole 16-row tiles: the per-round attention
    // kernels on tensor cores.
    const int chunk = int(k.lsh->chunk), headDim = int(k.headDim);
    const int elemBytes = k.dtype == "f32" ? 4 : 2;
    lshEntry("attnc_lsh_hash_", "lsh_hash", op);
    lshEntry("attnc_lsh_sort_offsets_", "lsh_sort_offsets", op);
    lshEntry("attnc_lsh_sort_scatter_", "lsh_sort_scatter", op);
    if (!k.backward) {
      const bool mma = attnc::tile::lshMmaFwd(chunk, headDim, elemBytes);
      lshEntry("attnc_lsh_fwd_", mma ? "lsh_fwd_mma" : "lsh_fwd",
               attnc::tile::lshFwdLaunchTile(op, chunk, headDim, elemBytes));
      lshEntry("attnc_lsh_combine_", "lsh_combine", op);
      return;
    }
    lshEntry("attnc_lsh_bwd_preprocess_", "lsh_bwd_preprocess", op);
    const bool mma = attnc::tile::lshMmaBwd(chunk, headDim, elemBytes);
    const attnc::tile::LshTile bt = attnc::tile::lshBwdLaunchTile(op, chunk, headDim, elemBytes);
    lshEntry("attnc_lsh_bwd_dq_", mma ? "lsh_bwd_dq_mma" : "lsh_bwd_dq", bt);
    lshEntry("attnc_lsh_bwd_dkdv_", mma ? "lsh_bwd_dkdv_mma" : "lsh_bwd_dkdv", bt);
    lshEntry("attnc_lsh_bwd_combine_", "lsh_bwd_combine", op);
    return;
  }
  os << "// The tile (block_q, block_kv, warps, stages) attn-tile picked; a runtime\n"
        "// compiling for another GPU defines it first.\n#ifndef "
     << tileMacro << "\n#define " << tileMacro << " " << k.blockQ << ", " << k.blockKv << ", "
     << k.warps << ", " << k.stages << "\n#endif\n";
  if (k.sharedQk) {
    // Keys = normalised queries before the attention; dK folded into dQ after.
    std::string rowTmpl =
        llvm::formatv("{0}, ATTNC_TILE_WARPS({1}), {2}", k.headDim, tileMacro, elt).str();
    auto rowEntry = [&](StringRef prefix, StringRef fn) {
      std::string name = (prefix + k.name).str();
      os << "extern \"C\" __global__ void __launch_bounds__(" << tileThreads << ", 1) " << name
         << "(attnc::SharedQkArgs a) {\n  attnc::" << fn << "<" << rowTmpl << ">(a);\n}\n";
      entries.push_back(name);
    };
    rowEntry("attnc_shared_qk_normalise_", "shared_qk_normalise");
    if (k.backward)
      rowEntry("attnc_shared_qk_fold_dk_", "shared_qk_fold_dk");
  }
  if (!k.backward) {
    entry("attnc_fwd_", "AttnFwdArgs", "attnc::flash_fwd");
    return;
  }
  entry("attnc_bwd_preprocess_", "AttnBwdArgs", "attnc::flash_bwd_preprocess");
  entry("attnc_bwd_dkdv_", "AttnBwdArgs", "attnc::flash_bwd_dkdv");
  entry("attnc_bwd_dq_", "AttnBwdArgs", "attnc::flash_bwd_dq");
  if (k.numParams)
    entry("attnc_bwd_dparams_", "AttnBwdArgs", "attnc::flash_bwd_dparams");
}

void emitCpuEntries(const ManifestKernel &k, StringRef variant, raw_ostream &os,
                    std::vector<std::string> &entries) {
  if (k.lsh) {
    std::string name = (k.backward ? "attnc_cpu_lsh_bwd_" : "attnc_cpu_lsh_fwd_") + k.name;
    os << "extern \"C\" int " << name << "(const attnc::AttnLshArgs *a) {\n  return attnc::cpu::"
       << (k.backward ? "lsh_bwd" : "lsh_fwd") << "<" << k.lsh->chunk << ", " << k.lsh->before
       << ", " << k.lsh->after << ", " << k.headDim << ", " << variant << ">(*a);\n}\n";
    entries.push_back(name);
    return;
  }
  std::string tmpl =
      llvm::formatv("{0}, {1}, {2}, {3}", k.blockQ, k.blockKv, k.headDim, variant).str();
  std::string name = (k.backward ? "attnc_cpu_bwd_" : "attnc_cpu_fwd_") + k.name;
  // Low-rank entries run the projections around the attention (CBLAS or
  // loops, kernels/cpu/attnc/lowrank.h).
  bool lowrank = k.kvSource == "lowrank";
  const char *args = lowrank ? (k.backward ? "cpu::LowRankBwdArgs" : "cpu::LowRankFwdArgs")
                             : (k.backward ? "AttnBwdArgs" : "AttnFwdArgs");
  const char *fn = lowrank      ? (k.backward ? "lowrank_bwd" : "lowrank_fwd")
                   : k.sharedQk ? (k.backward ? "shared_qk_bwd" : "shared_qk_fwd")
                                : (k.backward ? "flash_bwd" : "flash_fwd");
  os << "extern \"C\" int " << name << "(const attnc::" << args
     << " *a) {\n  return attnc::cpu::" << fn << "<" << tmpl << ">(*a);\n}\n";
  entries.push_back(name);
}

} // namespace

LogicalResult emitKernels(ModuleOp module, Target target, raw_ostream &os,
                          std::vector<ManifestKernel> &kernels) {
  SmallVector<Operation *> ops;
  module.walk([&](Operation *op) {
    if (llvm::isa<FusedAttentionOp, FusedAttentionGradOp, FusedLshAttentionOp,
                  FusedLshAttentionGradOp>(op))
      ops.push_back(op);
  });
  os << "// Generated by attnc: fused attention kernels for "
     << (target == Target::Cuda ? "CUDA (NVRTC)" : "the CPU") << ". Do not edit.\n";
  os << (target == Target::Cuda ? "#include \"attnc/attention.cuh\"\n\n"
                                : "#include \"attnc/attention.h\"\n\n");
  os << "namespace {\n";
  emitVariantHelpers(os);
  os << "} // namespace\n";

  for (Operation *op : ops) {
    ManifestKernel info;
    LogicalResult ok = success();
    Type elt;
    if (auto fwd = llvm::dyn_cast<FusedAttentionOp>(op)) {
      ok = describe(fwd, false, target, info);
      elt = fwd.getElementType();
    } else if (auto lfwd = llvm::dyn_cast<FusedLshAttentionOp>(op)) {
      ok = describeLsh(lfwd, false, info);
      if (auto seed = lfwd.getSeed())
        info.lsh->seed = *seed;
      elt = lfwd.getElementType();
    } else if (auto lbwd = llvm::dyn_cast<FusedLshAttentionGradOp>(op)) {
      ok = describeLsh(lbwd, true, info);
      info.deterministic = lbwd.getDeterministic();
      elt = lbwd.getElementType();
    } else {
      auto bwd = llvm::cast<FusedAttentionGradOp>(op);
      ok = describe(bwd, true, target, info);
      info.deterministic = bwd.getDeterministic();
      elt = bwd.getElementType();
    }
    if (failed(ok))
      return failure();
    if (target == Target::Cpu && !elt.isF32())
      return op->emitOpError("the CPU backend computes in f32; found ") << elt;
    std::string variant = "Variant_" + info.name;
    os << "\n// " << info.name << ": " << (info.backward ? "backward" : "forward") << ", "
       << info.dtype << ", head dim " << info.headDim << ", kv " << info.kvSource
       << (info.share.empty() ? "" : "(" + info.share + ")")
       << (info.lsh ? llvm::formatv(" buckets {0} rounds {1} chunk {2} window -{3}/+{4}",
                                    info.lsh->numBuckets, info.lsh->rounds, info.lsh->chunk,
                                    info.lsh->before, info.lsh->after)
                          .str()
                    : std::string())
       << (info.sharedQk && !info.lsh ? ", shared QK" : "") << ", tile " << info.blockQ << "x"
       << info.blockKv << " warps " << info.warps << " stages " << info.stages << "\n";
    os << "namespace {\n";
    if (failed(emitVariantStruct(op, variant, os)))
      return failure();
    os << "} // namespace\n";
    if (target == Target::Cuda)
      emitCudaEntries(info, variant, cudaElementType(elt), os, info.entryPoints);
    else
      emitCpuEntries(info, variant, os, info.entryPoints);
    kernels.push_back(std::move(info));
  }
  return success();
}

} // namespace attnc::codegen
