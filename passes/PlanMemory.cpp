//===- PlanMemory.cpp - One activation arena for a model's training step --===//
//
// Every tensor a @train_<model> function computes gets an offset in one
// arena: buffers whose live ranges are disjoint share bytes. Liveness is
// measured in top-level op indices (the function is one straight-line
// block), and offsets come from the usual greedy heuristic, largest buffer
// first at the lowest offset free of every buffer it overlaps in time. The
// plan also reports the peak of live bytes (a lower bound on any arena) and
// the bytes the forward keeps for the backward, the number reversible
// layers keep flat as depth grows.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

#include <algorithm>
#include <numeric>
#include <optional>

namespace attnc {
#define GEN_PASS_DEF_PLANMEMORY
#include "passes/Passes.h.inc"
} // namespace attnc

using namespace mlir;
using namespace attnc::attn;

namespace {

constexpr int64_t kAlign = 64;

int64_t alignUp(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

/// One arena buffer: an op result, or the scratch of an attn.row_chunks.
struct Buffer {
  Operation *op;
  int64_t result; ///< result number, or -1 for a row_chunks op's scratch
  int64_t bytes;
  int64_t start, end; ///< live at op indices [start, end]
  int64_t offset = -1;

  bool overlapsInTime(const Buffer &o) const { return start <= o.end && o.start <= end; }
};

/// Bytes of a statically shaped tensor, rounded up to the arena alignment.
FailureOr<int64_t> bytesOf(Operation *op, Value v) {
  auto type = llvm::cast<RankedTensorType>(v.getType());
  if (!type.hasStaticShape())
    return op->emitOpError("result #") << llvm::cast<OpResult>(v).getResultNumber()
                                       << " has a dynamic shape; cannot plan " << type;
  Type elem = type.getElementType();
  if (!elem.isIntOrFloat())
    return op->emitOpError("cannot size element type ") << elem << " for the memory plan";
  int64_t width = (elem.getIntOrFloatBitWidth() + 7) / 8;
  return alignUp(type.getNumElements() * width);
}

/// Places each buffer, largest first (ties: earlier definition, then
/// creation order), at the lowest aligned offset free of every placed buffer
/// live at the same time. Returns the arena size.
int64_t assignOffsets(std::vector<Buffer> &buffers) {
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (buffers[a].bytes != buffers[b].bytes)
      return buffers[a].bytes > buffers[b].bytes;
    return buffers[a].start < buffers[b].start;
  });
  std::vector<size_t> placed;
  int64_t arena = 0;
  for (size_t i : order) {
    Buffer &buf = buffers[i];
    std::vector<const Buffer *> conflicts;
    for (size_t j : placed)
      if (buffers[j].overlapsInTime(buf) && buffers[j].bytes > 0)
        conflicts.push_back(&buffers[j]);
    llvm::sort(conflicts, [](const Buffer *a, const Buffer *b) { return a->offset < b->offset; });
    // Sizes and offsets are multiples of the alignment, so every candidate is.
    int64_t offset = 0;
    for (const Buffer *c : conflicts) {
      if (offset + buf.bytes <= c->offset)
        break;
      offset = std::max(offset, c->offset + c->bytes);
    }
    buf.offset = offset;
    placed.push_back(i);
    arena = std::max(arena, offset + buf.bytes);
  }
  return arena;
}

/// Where the peak is, for reports: "layer 1 attention", "layer 0
/// feed-forward", "outside the layers (matmul)".
std::string describePeak(Operation *op) {
  std::string what = llvm::isa<AttentionOp>(op)       ? "attention"
                     : llvm::isa<AttentionGradOp>(op) ? "attention backward"
                     : llvm::isa<RowChunksOp>(op)     ? "feed-forward"
                     : llvm::isa<MatmulOp>(op)        ? "matmul"
                     : llvm::isa<FusedRowsOp>(op)     ? "row kernel"
                                                      : op->getName().stripDialect().str();
  auto layer = op->getAttrOfType<IntegerAttr>("attn.layer");
  if (layer && layer.getInt() >= 0)
    return "layer " + std::to_string(layer.getInt()) + " " + what;
  return "outside the layers (" + what + ")";
}

struct PlanMemoryPass : public attnc::impl::PlanMemoryBase<PlanMemoryPass> {
  using PlanMemoryBase::PlanMemoryBase;

  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (func->hasAttr("attn.model") && !func.isExternal())
        if (failed(plan(func)))
          return signalPassFailure();
  }

  LogicalResult plan(func::FuncOp func) {
    if (!func.getBody().hasOneBlock())
      return func.emitOpError("has ")
             << func.getBody().getBlocks().size()
             << " blocks; attn-plan-memory needs a single straight-line block";
    Block &entry = func.getBody().front();
    llvm::DenseMap<Operation *, int64_t> index;
    int64_t last = -1;
    for (Operation &op : entry)
      index[&op] = ++last;

    std::vector<Buffer> buffers;
    std::optional<int64_t> backwardStart; // the loss seed: the first attn.constant
    for (Operation &op : entry) {
      int64_t at = index[&op];
      if (llvm::isa<ConstantOp>(op)) {
        if (!backwardStart)
          backwardStart = at;
        continue; // a scalar the runtime materialises, not an arena buffer
      }
      for (OpResult r : op.getResults()) {
        if (!llvm::isa<RankedTensorType>(r.getType()))
          continue;
        // A returned gradient is written straight into the runtime's
        // gradient buffer (codegen/ModelStepWalker.cpp), not the arena.
        if (llvm::any_of(r.getUses(), [](OpOperand &u) {
              return llvm::isa<func::ReturnOp>(u.getOwner()) && u.getOperandNumber() > 0;
            }))
          continue;
        FailureOr<int64_t> bytes = bytesOf(&op, r);
        if (failed(bytes))
          return failure();
        // A use inside a region belongs to the enclosing top-level op; the
        // return is the last op, so the returned loss lives to the end; an
        // unused result still needs its bytes while the op writes it.
        int64_t end = at;
        for (Operation *user : r.getUsers())
          end = std::max(end, index.lookup(entry.findAncestorOpInBlock(*user)));
        buffers.push_back({&op, r.getResultNumber(), *bytes, at, end});
      }
      // A chunked body's intermediates: an upper bound, live only while the
      // op runs (the kernel reuses them from chunk to chunk). Values inside
      // a fused row kernel in the body never reach memory.
      if (auto rc = llvm::dyn_cast<RowChunksOp>(op)) {
        int64_t scratch = 0;
        for (Operation &inner : rc.getBody().front().without_terminator())
          for (Value v : inner.getResults()) {
            if (!llvm::isa<RankedTensorType>(v.getType()))
              continue;
            FailureOr<int64_t> bytes = bytesOf(&inner, v);
            if (failed(bytes))
              return failure();
            scratch += *bytes;
          }
        buffers.push_back({&op, -1, scratch, at, at});
      }
    }

    const int64_t arena = assignOffsets(buffers);

    // Peak and kept bytes from the live intervals (a sweep over op indices).
    std::vector<int64_t> delta(last + 2, 0);
    int64_t kept = 0;
    for (const Buffer &b : buffers) {
      delta[b.start] += b.bytes;
      delta[b.end + 1] -= b.bytes;
      if (backwardStart && b.start < *backwardStart && b.end >= *backwardStart)
        kept += b.bytes;
    }
    int64_t peak = 0, live = 0, peakIndex = 0;
    for (int64_t i = 0; i <= last; ++i)
      if ((live += delta[i]) > peak)
        peak = live, peakIndex = i;

    // Attributes: offsets per result (-1: not in the arena), scratch on
    // the row_chunks ops, totals on the function.
    Builder b(func.getContext());
    llvm::DenseMap<Operation *, SmallVector<int64_t>> offsets;
    for (Operation &op : entry)
      if (op.getNumResults())
        offsets[&op].assign(op.getNumResults(), -1);
    for (const Buffer &buf : buffers) {
      if (buf.result >= 0) {
        offsets[buf.op][buf.result] = buf.offset;
        continue;
      }
      buf.op->setAttr("attn.scratch_offset", b.getI64IntegerAttr(buf.offset));
      buf.op->setAttr("attn.scratch_bytes", b.getI64IntegerAttr(buf.bytes));
      // Inside the scratch, the body's values one after another in body
      // order (the sizes summed above), so codegen reads every offset
      // from the plan.
      int64_t next = buf.offset;
      for (Operation &inner : buf.op->getRegion(0).front().without_terminator()) {
        if (!inner.getNumResults())
          continue;
        SmallVector<int64_t> at;
        for (Value v : inner.getResults()) {
          at.push_back(next);
          next += *bytesOf(&inner, v); // sized without error above
        }
        inner.setAttr("attn.arena_offsets", b.getDenseI64ArrayAttr(at));
      }
    }
    for (Operation &op : entry)
      if (op.getNumResults())
        op.setAttr("attn.arena_offsets", b.getDenseI64ArrayAttr(offsets[&op]));
    func->setAttr("attn.arena_bytes", b.getI64IntegerAttr(arena));
    func->setAttr("attn.peak_live_bytes", b.getI64IntegerAttr(peak));
    func->setAttr("attn.kept_bytes", b.getI64IntegerAttr(kept));
    for (Operation &op : entry)
      if (index[&op] == peakIndex)
        func->setAttr("attn.peak_where", b.getStringAttr(describePeak(&op)));
    if (report)
      func.emitRemark() << "arena " << arena << " bytes, peak live " << peak
                        << " bytes, kept for the backward " << kept << " bytes, " << buffers.size()
                        << " buffers";
    return success();
  }
};

} // namespace
