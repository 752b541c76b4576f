//===- DeriveModelBackward.cpp - Reverse mode over a model's graph --------===//
//
// Appends the backward of a @train_<model> function (attn-expand-model):
// cotangents flow from the loss back through every graph op, gradients of
// a value used twice are summed, and the function returns the loss followed
// by the gradient of every parameter. A reversible layer's backward does
// not use the layer's forward values: it rebuilds the inputs from the
// outputs (x2 = y2 − FFN(LN(y1)), x1 = y1 − Attn(LN(x2))) with cloned
// branch ops and differentiates the clones, so forward activations die
// during the forward and the memory plan does not grow with depth.
//
//===----------------------------------------------------------------------===//
#include "passes/GraphBuilder.h"
#include "passes/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

namespace attnc {
#define GEN_PASS_DEF_DERIVEMODELBACKWARD
#include "passes/Passes.h.inc"
} // namespace attnc

using namespace mlir;
using namespace attnc;
using namespace attnc::attn;

namespace {

int64_t layerOf(Operation *op) {
  auto a = op->getAttrOfType<IntegerAttr>("attn.layer");
  return a ? a.getInt() : -1;
}

/// Reverse-mode differentiation over graph ops, with one cotangent map.
class Adjoint {
public:
  explicit Adjoint(GraphBuilder &g) : g(g) {}

  /// The cotangent of `v`, or null when nothing flows into it.
  Value get(Value v) const { return grads.lookup(v); }
  void set(Value v, Value d) { grads[v] = d; }
  /// Adds `d` to the cotangent of `v`.
  void accumulate(Value v, Value d) {
    if (!d)
      return;
    if (Value old = grads.lookup(v))
      grads[v] = g.add(old, d);
    else
      grads[v] = d;
  }

  /// Differentiates `ops` (in program order) back to front.
  LogicalResult backprop(ArrayRef<Operation *> ops) {
    for (Operation *op : llvm::reverse(ops))
      if (failed(backprop(op)))
        return failure();
    return success();
  }

  LogicalResult backprop(Operation *op) {
    if (llvm::none_of(op->getResults(), [&](Value r) { return bool(get(r)); }))
      return success(); // nothing flows back through this op
    int64_t saved = g.layer;
    g.layer = layerOf(op);
    LogicalResult r = rule(op);
    g.layer = saved;
    return r;
  }

private:
  LogicalResult rule(Operation *op) {
    OpBuilder &b = g.b;
    if (auto e = llvm::dyn_cast<EmbedOp>(op)) {
      Value dy = get(e.getResult());
      // Checked for NaN/Inf by the generated step, like the forward's
      // named values (a diverging backward stops here, named).
      if (Operation *def = dy.getDefiningOp(); def && def->getNumResults() == 1)
        def->setAttr("attn.name", g.b.getStringAttr("the gradient reaching the embeddings"));
      auto eg = g.make<EmbedGradOp>(e.getTable().getType(), e.getPositions().getType(),
                                    e.getTokens(), dy);
      accumulate(e.getTable(), eg.getDtable());
      accumulate(e.getPositions(), eg.getDpositions());
      return success();
    }
    if (auto ln = llvm::dyn_cast<LayerNormOp>(op)) {
      Value dy = get(ln.getResult());
      if (!dy)
        return success();
      Value dx = g.make<LayerNormGradOp>(ln.getInput().getType(), dy, ln.getInput(), ln.getGamma(),
                                         ln.getMean(), ln.getRstd());
      auto pg = g.make<LayerNormParamGradOp>(ln.getGamma().getType(), ln.getBeta().getType(), dy,
                                             ln.getInput(), ln.getMean(), ln.getRstd());
      accumulate(ln.getInput(), dx);
      accumulate(ln.getGamma(), pg.getDgamma());
      accumulate(ln.getBeta(), pg.getDbeta());
      return success();
    }
    if (auto mm = llvm::dyn_cast<MatmulOp>(op)) {
      if (mm.getTransposeA() || mm.getTransposeB())
        return op->emitOpError("differentiating a transposed matmul is not supported");
      Value dc = get(mm.getResult());
      accumulate(mm.getLhs(), g.matmul(dc, mm.getRhs(), false, /*tb=*/true));
      accumulate(mm.getRhs(), g.matmul(mm.getLhs(), dc, /*ta=*/true, false));
      return success();
    }
    if (auto ba = llvm::dyn_cast<BiasAddOp>(op)) {
      Value dy = get(ba.getResult());
      accumulate(ba.getInput(), dy);
      accumulate(ba.getBias(), g.columnSum(dy));
      return success();
    }
    if (auto add = llvm::dyn_cast<AddOp>(op)) {
      Value dy = get(add.getResult());
      accumulate(add.getLhs(), dy);
      accumulate(add.getRhs(), dy);
      return success();
    }
    if (auto act = llvm::dyn_cast<ActivationOp>(op)) {
      accumulate(act.getInput(), g.make<ActivationGradOp>(act.getType(), act.getKind(),
                                                          act.getInput(), get(act.getResult())));
      return success();
    }
    if (auto d = llvm::dyn_cast<DropoutOp>(op)) {
      // The same mask on the cotangent.
      accumulate(d.getInput(), g.make<DropoutOp>(d.getType(), get(d.getResult()), d.getRateAttr(),
                                                 d.getStreamAttr()));
      return success();
    }
    if (auto s = llvm::dyn_cast<SplitHeadsOp>(op)) {
      accumulate(s.getInput(), g.mergeHeads(get(s.getResult())));
      return success();
    }
    if (auto m = llvm::dyn_cast<MergeHeadsOp>(op)) {
      auto in = GraphBuilder::shape(m.getInput());
      accumulate(m.getInput(), g.splitHeads(get(m.getResult()), in[0], in[1]));
      return success();
    }
    if (auto c = llvm::dyn_cast<ConcatColsOp>(op)) {
      Value dy = get(c.getResult());
      int64_t R = GraphBuilder::shape(dy)[0], A = GraphBuilder::shape(c.getLhs())[1],
              B = GraphBuilder::shape(c.getRhs())[1];
      accumulate(c.getLhs(), g.make<SliceColsOp>(g.f32({R, A}), dy, b.getI64IntegerAttr(0)));
      accumulate(c.getRhs(), g.make<SliceColsOp>(g.f32({R, B}), dy, b.getI64IntegerAttr(A)));
      return success();
    }
    if (auto ce = llvm::dyn_cast<CrossEntropyOp>(op)) {
      Value dloss = get(ce.getLoss());
      if (!dloss)
        return success();
      accumulate(ce.getLogits(),
                 g.make<CrossEntropyGradOp>(ce.getLogits().getType(), ce.getLogits(),
                                            ce.getTargets(), ce.getCount(), dloss));
      return success();
    }
    if (auto at = llvm::dyn_cast<AttentionOp>(op))
      return attention(at);
    if (auto rc = llvm::dyn_cast<RowChunksOp>(op))
      return rowChunks(rc);
    return op->emitOpError("has no derivative rule in attn-derive-model-backward");
  }

  LogicalResult attention(AttentionOp at) {
    Value dout = get(at.getOut());
    if (!dout)
      return success();
    if (at.getLengths())
      return at.emitOpError("key padding lengths are not supported in a model graph");
    SmallVector<Type> paramTypes;
    for (Value p : {at.getProjE(), at.getProjF(), at.getParams()})
      if (p)
        paramTypes.push_back(p.getType());
    auto grad = g.make<AttentionGradOp>(
        at.getQuery().getType(), at.getKey().getType(), at.getValue().getType(), paramTypes,
        at.getVariantAttr(), at.getQuery(), at.getKey(), at.getValue(), at.getOut(), at.getLse(),
        dout, at.getProjE(), at.getProjF(), at.getRotations(), at.getParams(),
        g.b.getI64IntegerAttr(std::max<int64_t>(0, layerOf(at))));
    accumulate(at.getQuery(), grad.getDquery());
    if (at.getKey() != at.getQuery()) // shared QK: the key path is inside dq
      accumulate(at.getKey(), grad.getDkey());
    accumulate(at.getValue(), grad.getDvalue());
    unsigned i = 0;
    for (Value p : {at.getProjE(), at.getProjF(), at.getParams()})
      if (p)
        accumulate(p, grad.getParamGrads()[i++]);
    return success();
  }

  /// The backward of a chunked body is another chunked body: it recomputes
  /// the chunk's forward and differentiates it, so the intermediates stay
  /// chunk-sized; gradients of whole inputs (weights) are summed over chunks.
  LogicalResult rowChunks(RowChunksOp rc) {
    OpBuilder &b = g.b;
    Location loc = rc.getLoc();
    Block &fwd = rc.getBody().front();
    auto fyield = llvm::cast<ChunksYieldOp>(fwd.getTerminator());
    SmallVector<Value> inputs(rc.getInputs());
    SmallVector<bool> split(rc.getSplit());
    SmallVector<Type> argTypes(fwd.getArgumentTypes());
    for (auto [i, r] : llvm::enumerate(rc.getResults())) {
      Value d = get(r);
      if (!d)
        return rc.emitOpError("result #") << i << " has no cotangent; not supported";
      inputs.push_back(d);
      split.push_back(!rc.getSums()[i]);
      argTypes.push_back(fyield.getValues()[i].getType());
    }
    // Build the body first (its yields decide the results).
    auto blk = std::make_unique<Block>();
    for (Type t : argTypes)
      blk->addArgument(t, loc);
    IRMapping map;
    for (auto [a, n] : llvm::zip(fwd.getArguments(), blk->getArguments()))
      map.map(a, n);
    SmallVector<Value> yields;
    SmallVector<Type> resultTypes;
    SmallVector<bool> sums;
    SmallVector<Value> targets; // the forward inputs the results are gradients of
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(blk.get());
      SmallVector<Operation *> cloned;
      for (Operation &op : fwd.without_terminator())
        cloned.push_back(b.clone(op, map));
      for (auto [i, v] : llvm::enumerate(fyield.getValues()))
        accumulate(map.lookup(v), blk->getArgument(fwd.getNumArguments() + i));
      if (failed(backprop(cloned)))
        return failure();
      for (auto [i, a] : llvm::enumerate(fwd.getArguments())) {
        Value d = get(map.lookup(a));
        if (!d)
          continue;
        yields.push_back(d);
        sums.push_back(!rc.getSplit()[i]);
        resultTypes.push_back(rc.getInputs()[i].getType());
        targets.push_back(rc.getInputs()[i]);
      }
      b.create<ChunksYieldOp>(loc, yields);
    }
    auto bwd = g.make<RowChunksOp>(resultTypes, inputs, rc.getChunkAttr(),
                                   b.getDenseBoolArrayAttr(split), b.getDenseBoolArrayAttr(sums));
    bwd.getBody().push_back(blk.release());
    for (auto [t, r] : llvm::zip(targets, bwd.getResults()))
      accumulate(t, r);
    return success();
  }

  GraphBuilder &g;
  llvm::DenseMap<Value, Value> grads;
};

/// The ops among `ops` that `root` depends on without going through `stop`,
/// in program order.
SmallVector<Operation *> branchOf(Value root, Value stop, ArrayRef<Operation *> ops) {
  llvm::SetVector<Operation *> in;
  SmallVector<Value> work = {root};
  llvm::DenseSet<Operation *> member(ops.begin(), ops.end());
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (v == stop)
      continue;
    Operation *def = v.getDefiningOp();
    if (!def || !member.contains(def) || !in.insert(def))
      continue;
    for (Value v : def->getOperands())
      work.push_back(v);
  }
  SmallVector<Operation *> out;
  for (Operation *op : ops)
    if (in.contains(op))
      out.push_back(op);
  return out;
}

struct DeriveModelBackwardPass
    : public attnc::impl::DeriveModelBackwardBase<DeriveModelBackwardPass> {
  using DeriveModelBackwardBase::DeriveModelBackwardBase;

  void runOnOperation() override {
    SmallVector<func::FuncOp> funcs;
    for (auto f : getOperation().getOps<func::FuncOp>())
      // @infer_<model> has no loss to differentiate.
      if (f->hasAttr("attn.model") && !f->hasAttr("attn.grad_of") && !f->hasAttr("attn.inference"))
        funcs.push_back(f);
    for (func::FuncOp f : funcs)
      if (failed(derive(f)))
        return signalPassFailure();
  }

  LogicalResult derive(func::FuncOp func) {
    Block &entry = func.getBody().front();
    auto ret = llvm::cast<func::ReturnOp>(entry.getTerminator());
    if (ret.getNumOperands() != 1)
      return func.emitOpError("expected to return only the loss");
    OpBuilder b(ret);
    GraphBuilder g(b, func.getLoc());
    Adjoint adj(g);
    adj.set(ret.getOperand(0), b.create<ConstantOp>(func.getLoc(), ret.getOperand(0).getType(),
                                                    b.getF64FloatAttr(1.0)));

    // Segments of consecutive top-level ops with the same layer tag.
    SmallVector<SmallVector<Operation *>> segments;
    int64_t current = -2;
    for (Operation &op : entry.without_terminator()) {
      if (llvm::isa<ConstantOp>(op))
        continue;
      int64_t l = layerOf(&op);
      if (segments.empty() || l != current)
        segments.emplace_back();
      segments.back().push_back(&op);
      current = l;
    }
    // What a later reversible layer rebuilt for an original value.
    llvm::DenseMap<Value, Value> rebuilt;
    for (auto &seg : llvm::reverse(segments)) {
      Operation *y1op = nullptr, *y2op = nullptr;
      for (Operation *op : seg)
        if (auto tag = op->getAttrOfType<StringAttr>("attn.rev"))
          (tag.getValue() == "y1" ? y1op : y2op) = op;
      if (!y1op || !y2op) {
        if (failed(recomputed(g, adj, seg)))
          return failure();
        continue;
      }
      if (failed(
              reversible(g, adj, seg, llvm::cast<AddOp>(y1op), llvm::cast<AddOp>(y2op), rebuilt)))
        return failure();
    }

    SmallVector<Value> results = {ret.getOperand(0)};
    SmallVector<Attribute> gradOf;
    for (BlockArgument a : entry.getArguments()) {
      if (!func.getArgAttr(a.getArgNumber(), "attn.param") ||
          func.getArgAttr(a.getArgNumber(), "attn.constant"))
        continue;
      Value d = adj.get(a);
      if (!d)
        return func.emitOpError("parameter ")
               << func.getArgAttr(a.getArgNumber(), "attn.param") << " gets no gradient";
      results.push_back(d);
      gradOf.push_back(b.getI64IntegerAttr(a.getArgNumber()));
    }
    b.create<func::ReturnOp>(ret.getLoc(), results);
    ret.erase();
    // The bottom layer's rebuilt inputs (and forward values only the loss
    // needed) may be dead; drop them so no kernel computes them.
    auto eraseDead = [](Block &block) {
      for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
        if (op.use_empty() && !op.hasTrait<OpTrait::IsTerminator>() && isPure(&op))
          op.erase();
    };
    eraseDead(entry);
    // A chunked backward recomputes its chunk's forward; what the gradient
    // does not read (the last GEMM and bias of the FFN) goes too.
    for (auto rc : func.getOps<RowChunksOp>())
      eraseDead(rc.getBody().front());
    func.setType(b.getFunctionType(entry.getArgumentTypes(), TypeRange(ValueRange(results))));
    func->setAttr("attn.grad_of", b.getArrayAttr(gradOf));
    return success();
  }

  /// A standard layer under `recompute-layers`: its backward differentiates
  /// a clone of the layer's forward, so of the forward's values only the
  /// layer's inputs (and what the ops below need) stay alive. Not applied
  /// to the ops outside layers (embedding, head, loss): those run as is.
  LogicalResult recomputed(GraphBuilder &g, Adjoint &adj, ArrayRef<Operation *> seg) {
    if (!recomputeLayers || layerOf(seg.front()) < 0)
      return adj.backprop(seg);
    IRMapping map;
    SmallVector<Operation *> clones;
    int64_t saved = g.layer;
    g.layer = layerOf(seg.front());
    for (Operation *op : seg) {
      // Only values something outside the layer reads need a cotangent
      // moved onto the clone; the clone is differentiated from there.
      clones.push_back(g.b.clone(*op, map));
    }
    g.layer = saved;
    for (Operation *op : seg)
      for (Value r : op->getResults())
        if (Value d = adj.get(r))
          adj.set(map.lookup(r), d);
    return adj.backprop(clones);
  }

  /// One reversible layer: y1 = x1 + a(x2), y2 = x2 + f(y1).
  LogicalResult reversible(GraphBuilder &g, Adjoint &adj, ArrayRef<Operation *> seg, AddOp y1op,
                           AddOp y2op, llvm::DenseMap<Value, Value> &rebuilt) {
    OpBuilder &b = g.b;
    Value y1 = y1op.getResult(), y2 = y2op.getResult();
    Value x1 = y1op.getLhs(), a = y1op.getRhs(), x2 = y2op.getLhs(), f = y2op.getRhs();
    auto current = [&](Value v) { return rebuilt.lookup(v) ? rebuilt.lookup(v) : v; };
    Value y1c = current(y1), y2c = current(y2);
    int64_t saved = g.layer;
    g.layer = layerOf(y1op);
    auto cloneBranch = [&](Value root, Value input, IRMapping &map,
                           SmallVector<Operation *> &cloned) {
      for (Operation *op : branchOf(root, input, seg))
        cloned.push_back(b.clone(*op, map));
      return map.lookupOrDefault(root);
    };
    // Rebuild the inputs: x2 = y2 − f(y1), then x1 = y1 − a(x2).
    IRMapping mapF;
    mapF.map(y1, y1c);
    SmallVector<Operation *> ffnOps, attnOps;
    Value fc = cloneBranch(f, y1, mapF, ffnOps);
    Value x2r = g.sub(y2c, fc);
    IRMapping mapA;
    mapA.map(x2, x2r);
    Value ac = cloneBranch(a, x2, mapA, attnOps);
    Value x1r = g.sub(y1c, ac);
    g.layer = saved;

    Value dy1 = adj.get(y1), dy2 = adj.get(y2);
    if (!dy1 || !dy2)
      return y1op.emitOpError("reversible layer output without a cotangent");
    // Through y2 = x2 + f(y1): f's cotangent is dy2, y1 gains f's input path.
    if (y1c != y1)
      adj.set(y1c, dy1);
    adj.set(fc, dy2);
    if (failed(adj.backprop(ffnOps)))
      return failure();
    Value dx1 = adj.get(y1c);
    // Through y1 = x1 + a(x2).
    adj.set(ac, dx1);
    adj.set(x2r, dy2);
    if (failed(adj.backprop(attnOps)))
      return failure();
    Value dx2 = adj.get(x2r);
    adj.accumulate(x1, dx1);
    adj.accumulate(x2, dx2);
    rebuilt[x1] = x1r;
    rebuilt[x2] = x2r;
    return success();
  }
};

} // namespace
