//===- FuseRows.cpp - Group row-local graph op chains into one kernel -----===//
//
// Residual sums, bias adds, activations, dropout, layer norms and their
// input gradients, embedding lookups: each output row depends only on the
// same row of its inputs. A chain of them becomes one attn.fused_rows op,
// which codegen emits as a single pass over the rows; the chain's inner
// values never reach memory. Inside a chunked FFN body (attn.row_chunks)
// the same holds per chunk: bias + activation become one pass over the
// chunk's intermediate.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

namespace attnc {
#define GEN_PASS_DEF_FUSEROWS
#include "passes/Passes.h.inc"
} // namespace attnc

using namespace mlir;
using namespace attnc::attn;

namespace {

/// Rows of a row-local op: the first dimension of its first result.
int64_t rowsOf(Operation *op) {
  return llvm::cast<RankedTensorType>(op->getResult(0).getType()).getDimSize(0);
}

struct FuseRowsPass : public attnc::impl::FuseRowsBase<FuseRowsPass> {
  using FuseRowsBase::FuseRowsBase;

  void runOnOperation() override {
    int counter = 0;
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (!func->hasAttr("attn.model") || func.getBody().empty())
        continue;
      fuse(func.getBody().front(), counter, /*chains=*/true);
      for (auto rc : func.getBody().front().getOps<RowChunksOp>())
        fuse(rc.getBody().front(), counter, inChunks);
    }
  }

  /// Groups the row-local ops of `block`; without `chains`, each op is a
  /// group of its own (codegen still sees only attn.fused_rows).
  void fuse(Block &block, int &counter, bool chains) {
    // Groups of ops in program order; groupOf maps a member to its group.
    SmallVector<SmallVector<Operation *>> groups;
    llvm::DenseMap<Operation *, unsigned> groupOf;
    for (Operation &op : block) {
      if (!isRowLocal(&op))
        continue;
      std::optional<unsigned> joined;
      for (Value v : chains ? op.getOperands() : ValueRange()) {
        Operation *def = v.getDefiningOp();
        auto it = def ? groupOf.find(def) : groupOf.end();
        if (it == groupOf.end() || rowsOf(def) != rowsOf(&op))
          continue;
        if (canAppend(groups[it->second], &op)) {
          joined = it->second;
          break;
        }
      }
      if (!joined) {
        joined = groups.size();
        groups.emplace_back();
      }
      groups[*joined].push_back(&op);
      groupOf[&op] = *joined;
    }
    for (auto &g : groups)
      build(g, counter++);
  }

  /// `op` may join `group` when no op outside the group uses a group value
  /// before `op` (the fused kernel runs where its last member is).
  static bool canAppend(ArrayRef<Operation *> group, Operation *op) {
    llvm::DenseSet<Operation *> members(group.begin(), group.end());
    for (Operation *m : group)
      for (Operation *user : m->getUsers())
        if (!members.contains(user) && user != op && user->getBlock() == op->getBlock() &&
            user->isBeforeInBlock(op))
          return false;
    return true;
  }

  void build(ArrayRef<Operation *> group, int index) {
    Operation *last = group.back();
    llvm::DenseSet<Operation *> members(group.begin(), group.end());
    llvm::SetVector<Value> inputs;
    SmallVector<Value> outputs;
    for (Operation *op : group) {
      for (Value v : op->getOperands())
        if (!v.getDefiningOp() || !members.contains(v.getDefiningOp()))
          inputs.insert(v);
      for (Value r : op->getResults())
        if (llvm::any_of(r.getUsers(), [&](Operation *u) { return !members.contains(u); }))
          outputs.push_back(r);
    }
    OpBuilder b(last);
    b.setInsertionPointAfter(last);
    SmallVector<Type> types;
    for (Value v : outputs)
      types.push_back(v.getType());
    auto fused = b.create<FusedRowsOp>(last->getLoc(), types, inputs.getArrayRef(),
                                       b.getI64IntegerAttr(rowsOf(last)),
                                       b.getStringAttr("rows" + std::to_string(index)));
    if (auto l = last->getAttr("attn.layer"))
      fused->setAttr("attn.layer", l);
    // Names of checked values (attn-expand-model's attn.name) move onto the
    // kernel's results.
    SmallVector<Attribute> names;
    bool named = false;
    for (Value v : outputs) {
      auto n = v.getDefiningOp()->getAttrOfType<StringAttr>("attn.name");
      named |= bool(n);
      names.push_back(n ? n : b.getStringAttr(""));
    }
    if (named)
      fused->setAttr("attn.result_names", b.getArrayAttr(names));
    Block *body = new Block();
    fused.getBody().push_back(body);
    IRMapping map;
    for (Value v : inputs)
      map.map(v, body->addArgument(v.getType(), v.getLoc()));
    b.setInsertionPointToStart(body);
    for (Operation *op : group)
      b.clone(*op, map);
    SmallVector<Value> yields;
    for (Value v : outputs)
      yields.push_back(map.lookup(v));
    b.create<RowsYieldOp>(last->getLoc(), yields);
    for (auto [v, r] : llvm::zip(outputs, fused.getResults()))
      v.replaceAllUsesExcept(r, fused);
    for (Operation *op : llvm::reverse(group))
      op->erase();
  }
};

} // namespace
