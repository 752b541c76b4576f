//===- TileAttention.cpp - Tile configs that fit the target ---------------===//
//
// Shared-memory footprints come from kernels/abi/attnc/abi/TileModel.h, the same constexpr
// formulas the kernel headers size their buffers with, so the compiler's
// check and the kernels cannot disagree.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "attnc/abi/LshTileModel.h"
#include "attnc/abi/TileModel.h"

#include "mlir/IR/Builders.h"

namespace attnc {
#define GEN_PASS_DEF_TILEATTENTION
#include "passes/Passes.h.inc"
} // namespace attnc

using namespace mlir;
using namespace attnc::attn;

namespace {

struct TileAttentionPass : public attnc::impl::TileAttentionBase<TileAttentionPass> {
  using TileAttentionBase::TileAttentionBase;

  void runOnOperation() override {
    int sm = 0;
    if (target != "cuda" && target != "cpu") {
      getOperation().emitError("attn-tile: target must be cuda or cpu, found '") << target << "'";
      return signalPassFailure();
    }
    StringRef archName(arch);
    if (target == "cuda" &&
        (!archName.consume_front("sm_") || archName.rtrim('a').getAsInteger(10, sm) ||
         sm < attnc::tile::kOldestSm)) {
      getOperation().emitError("attn-tile: arch must be sm_70 or newer, found '") << arch << "'";
      return signalPassFailure();
    }
    unsigned counter = 0;
    WalkResult r = getOperation().walk([&](Operation *op) {
      LogicalResult ok = success();
      if (auto fwd = llvm::dyn_cast<FusedAttentionOp>(op))
        ok = tile(fwd, sm, /*backward=*/false, counter);
      else if (auto bwd = llvm::dyn_cast<FusedAttentionGradOp>(op))
        ok = tile(bwd, sm, /*backward=*/true, counter);
      else if (auto lfwd = llvm::dyn_cast<FusedLshAttentionOp>(op))
        ok = tileLsh(lfwd, /*backward=*/false, counter);
      else if (auto lbwd = llvm::dyn_cast<FusedLshAttentionGradOp>(op))
        ok = tileLsh(lbwd, /*backward=*/true, counter);
      return failed(ok) ? WalkResult::interrupt() : WalkResult::advance();
    });
    if (r.wasInterrupted())
      signalPassFailure();
  }

  /// LSH kernels: the CPU processes one chunk per task (block_q = block_kv
  /// = chunk); CUDA blocks take block_q queries of a chunk and stream the
  /// window's keys in block_kv tiles, both dividing the chunk, with static
  /// shared memory (kernels/abi/attnc/abi/LshTileModel.h).
  template <typename OpTy> LogicalResult tileLsh(OpTy op, bool backward, unsigned &counter) {
    Type elt = op.getElementType();
    int64_t headDim = op.getHeadDim(), chunk = op.getChunk();
    TileAttr t = op.getTile();
    auto pick = [](int64_t v, int64_t fallback) { return v == kAuto ? fallback : v; };
    int64_t blockQ, blockKv, warps, stages;
    if (target == "cpu") {
      if (!elt.isF32())
        return op.emitOpError("the CPU backend computes in f32; found ") << elt;
      blockQ = blockKv = chunk;
      warps = stages = 1;
    } else {
      attnc::tile::LshTile def =
          attnc::tile::lshDefaultTile(static_cast<int>(chunk), static_cast<int>(headDim));
      blockQ = pick(t.getBlockQ(), def.blockQ);
      blockKv = pick(t.getBlockKv(), def.blockKv);
      warps = pick(t.getWarps(), def.warps);
      stages = pick(t.getStages(), 1);
    }
    TileAttr chosen = TileAttr::get(op.getContext(), blockQ, blockKv, warps, stages);
    if (target == "cuda") {
      auto describe = [&](InFlightDiagnostic d) -> InFlightDiagnostic {
        d << "LSH tile config " << chosen << " (" << elementTypeName(elt) << ", head dim "
          << headDim << ", chunk " << chunk << ", " << (backward ? "backward" : "forward") << ", "
          << arch << ") ";
        return d;
      };
      if (op.getNumBuckets() > attnc::tile::kLshMaxBuckets)
        return op.emitOpError("LSH with ")
               << op.getNumBuckets() << " buckets: the CUDA hash kernel's histogram holds at most "
               << attnc::tile::kLshMaxBuckets;
      if (stages != 1)
        return describe(op.emitOpError())
               << "pipelines " << stages << " stages; the LSH kernels take stages = 1";
      attnc::tile::LshTile c{int(blockQ), int(blockKv), int(warps)};
      int64_t smem = attnc::tile::lshSmemBytes(c, int(headDim));
      if (smem > attnc::tile::kLshSmemLimitBytes)
        return describe(op.emitOpError())
               << "needs " << smem << " bytes of static shared memory; the LSH kernels allow "
               << attnc::tile::kLshSmemLimitBytes;
      if (!attnc::tile::lshValidTile(c, int(chunk), int(headDim)))
        return describe(op.emitOpError())
               << "is not a shape the LSH kernels support: block_q and block_kv must divide "
                  "the chunk and warps x 32, with at most 32 lanes per row and at most "
               << attnc::tile::kMaxThreads / 32 << " warps";
    }
    op.setTileAttr(chosen);
    if (!op.getKernel())
      op.setKernelAttr(StringAttr::get(
          op.getContext(), (backward ? "lsh_bwd" : "lsh") + std::to_string(counter++) + "_" +
                               elementTypeName(elt).str() + "_d" + std::to_string(headDim)));
    return success();
  }

  template <typename OpTy> LogicalResult tile(OpTy op, int sm, bool backward, unsigned &counter) {
    Type elt = op.getElementType();
    int64_t headDim = op.getHeadDim();
    int elemBytes = elt.isF32() ? 4 : 2;
    TileAttr t = op.getTile();
    auto pick = [](int64_t v, int fallback) { return v == kAuto ? int64_t(fallback) : v; };
    int64_t blockQ, blockKv, warps, stages;
    if (target == "cpu") {
      if (!elt.isF32())
        return op.emitOpError("the CPU backend computes in f32; found ") << elt;
      blockQ = pick(t.getBlockQ(), 64);
      blockKv = pick(t.getBlockKv(), 64);
      warps = pick(t.getWarps(), 1);
      stages = pick(t.getStages(), 1);
    } else {
      if (!attnc::tile::cudaHeadDimSupported(headDim))
        return op.emitOpError("head dim ")
               << headDim << " has no CUDA kernel (supported: 32, 64, 80, 96, 128, 256)";
      attnc::tile::TileConfig def =
          attnc::tile::defaultTile(elemBytes, static_cast<int>(headDim), sm, backward);
      // The forward kernel gives each warp 16 query rows: derive one of
      // block_q and warps from the other when only one is fixed.
      if (!backward && t.getWarps() == kAuto && t.getBlockQ() != kAuto)
        def.warps = static_cast<int>(t.getBlockQ() / attnc::tile::kRowsPerWarp);
      if (!backward && t.getBlockQ() == kAuto && t.getWarps() != kAuto)
        def.blockQ = static_cast<int>(t.getWarps() * attnc::tile::kRowsPerWarp);
      blockQ = pick(t.getBlockQ(), def.blockQ);
      blockKv = pick(t.getBlockKv(), def.blockKv);
      warps = pick(t.getWarps(), def.warps);
      stages = pick(t.getStages(), def.stages);
    }
    TileAttr chosen = TileAttr::get(op.getContext(), blockQ, blockKv, warps, stages);
    if (target == "cuda") {
      attnc::tile::TileConfig c{int(blockQ), int(blockKv), int(warps), int(stages)};
      const char *kind = backward ? "backward" : "forward";
      auto describe = [&](InFlightDiagnostic d) -> InFlightDiagnostic {
        d << "tile config " << chosen << " (" << elementTypeName(elt) << ", head dim " << headDim
          << ", " << kind << ", " << arch << ") ";
        return d;
      };
      if (!attnc::tile::validTile(c, int(headDim), backward))
        return describe(op.emitOpError())
               << "is not a shape the kernel supports: block sizes must be multiples of 16"
               << (backward ? ", warps must tile both blocks by 16-row groups"
                            : ", block_q = 16 x warps")
               << ", at most " << attnc::tile::kMaxThreads / 32 << " warps";
      int acc = attnc::tile::accFloats(c, int(headDim), backward);
      int budget = attnc::tile::accFloatBudget(elemBytes, backward);
      if (acc > budget)
        return describe(op.emitOpError())
               << "needs " << acc << " accumulator floats per thread; the budget that "
               << "avoids register spills is " << budget << " (of "
               << attnc::tile::kMaxRegsPerThread << " registers)";
      int64_t smem = attnc::tile::smemBytes(c, int(headDim), elemBytes, backward);
      int64_t limit = attnc::tile::smemLimitBytes(sm);
      if (smem > limit)
        return describe(op.emitOpError())
               << "needs " << smem << " bytes of shared memory; " << arch << " allows " << limit;
      if (sm < 80 && stages > 1)
        return describe(op.emitOpError())
               << "pipelines " << stages << " stages, which needs cp.async (sm_80 or newer)";
    }
    op.setTileAttr(chosen);
    if (!op.getKernel())
      op.setKernelAttr(StringAttr::get(
          op.getContext(), (backward ? "attn_bwd" : "attn") + std::to_string(counter++) + "_" +
                               elementTypeName(elt).str() + "_d" + std::to_string(headDim)));
    return success();
  }
};

} // namespace
