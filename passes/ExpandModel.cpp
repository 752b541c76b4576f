//===- ExpandModel.cpp - A model's forward graph as graph ops -------------===//
//
// attn.model (dims, layer template, objective) → func.func @train_<model>:
// embedding, `layers` copies of the layer, the final norm, the head and the
// loss, on flattened rows; and (infer) @infer_<model>: the same forward
// without dropout and loss, returning the logits, which evaluation,
// generation and filling run. The parameters are the functions' arguments,
// in the training runtime's order and with its names (docs/training.md), so
// a checkpoint's tensors map onto them one to one.
//
//===----------------------------------------------------------------------===//
#include "passes/GraphBuilder.h"
#include "passes/Passes.h"

#include "mlir/IR/SymbolTable.h"

#include <map>

namespace attnc {
#define GEN_PASS_DEF_EXPANDMODEL
#include "passes/Passes.h.inc"
} // namespace attnc

using namespace mlir;
using namespace attnc;
using namespace attnc::attn;

namespace {

/// One function argument: a parameter (or constant) with its runtime name.
struct ArgSpec {
  std::string name;
  SmallVector<int64_t> shape;
  bool constant = false; ///< no gradient (LSH rotations)
};

struct ExpandModelPass : public attnc::impl::ExpandModelBase<ExpandModelPass> {
  using ExpandModelBase::ExpandModelBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<ModelOp> models(module.getOps<ModelOp>());
    for (ModelOp model : models) {
      if (train && failed(expand(module, model, /*inference=*/false)))
        return signalPassFailure();
      if (infer && failed(expand(module, model, /*inference=*/true)))
        return signalPassFailure();
    }
  }

  /// Adds @train_<model> (forward, dropout, loss) or, with `inference`,
  /// @infer_<model> (forward without dropout, returning the logits).
  LogicalResult expand(ModuleOp module, ModelOp model, bool inference) {
    LayerOp layer = *model.getBody().getOps<LayerOp>().begin();
    auto variant = SymbolTable::lookupNearestSymbolFrom<VariantOp>(model, layer.getAttentionAttr());
    if (!variant)
      return model.emitOpError("layer refers to unknown variant ") << layer.getAttentionAttr();
    const int64_t batch = inference && inferBatch > 0 ? inferBatch : this->batch;
    if (batch <= 0)
      return model.emitOpError("batch must be positive, found ") << batch;
    const int64_t V = model.getVocab(), S = model.getSeq(), D = model.getDModel(),
                  H = model.getHeads(), F = model.getDFf(), L = model.getLayers();
    const int64_t Dh = D / H, R = batch * S;
    const bool rev = layer.getReversible(), ffn = layer.getFfnAct().has_value() || rev;
    const bool mlm = model.getObjective() == Objective::mlm;
    LowRankAttr lowrank = variant.getLowrankAttr();
    LshAttr lsh = variant.getLshAttr();
    if (lowrank && lowrank.isAutoK())
      return model.emitOpError("low-rank k of ")
             << variant.getSymNameAttr() << " is auto; run attn-resolve-tunables first";
    if (lsh && (lsh.getRounds() == kAuto || lsh.getBuckets() == kAuto))
      return model.emitOpError("LSH rounds/buckets of ")
             << variant.getSymNameAttr() << " are auto; run attn-resolve-tunables first";
    int64_t chunk = layer.getFfnChunk() ? int64_t(*layer.getFfnChunk()) : 0;
    if (chunk == kAuto)
      return model.emitOpError("ffn chunk is auto; run attn-resolve-tunables first");

    // The arguments, in the runtime's parameter order.
    // Inference has no targets.
    std::vector<ArgSpec> args = {{"tokens", {R}}};
    if (!inference)
      args.push_back({"targets", {R}});
    const size_t numInputs = args.size();
    args.push_back({"tok_emb", {V + (mlm ? 1 : 0), D}});
    args.push_back({"pos_emb", {S, D}});
    const bool layerwise = lowrank && lowrank.getShare() == ShareMode::layerwise;
    if (layerwise)
      args.push_back({"lowrank.E", {lowrank.getK(), S}});
    int64_t numParams = variant.getParams() ? int64_t(variant.getParams()->size()) : 0;
    for (int64_t l = 0; l < L; ++l) {
      std::string p = "layers." + std::to_string(l) + ".";
      args.push_back({p + "ln1.gamma", {D}});
      args.push_back({p + "ln1.beta", {D}});
      for (const char *m : {"q", "k", "v", "o"}) {
        if (*m == 'k' && variant.getSharedQk())
          continue;
        args.push_back({p + "attn.w" + m, {D, D}});
        args.push_back({p + "attn.b" + m, {D}});
      }
      if (ffn) {
        args.push_back({p + "ln2.gamma", {D}});
        args.push_back({p + "ln2.beta", {D}});
        args.push_back({p + "ffn.w1", {D, F}});
        args.push_back({p + "ffn.b1", {F}});
        args.push_back({p + "ffn.w2", {F, D}});
        args.push_back({p + "ffn.b2", {D}});
      }
      if (lowrank && !layerwise) {
        SmallVector<int64_t> shape = {lowrank.getK(), S};
        if (lowrank.getShare() == ShareMode::none)
          shape.insert(shape.begin(), H);
        args.push_back({p + "attn.E", shape});
        if (lowrank.getShare() == ShareMode::none || lowrank.getShare() == ShareMode::headwise)
          args.push_back({p + "attn.F", shape});
      }
      if (numParams)
        args.push_back({p + "attn.head_params", {numParams, H}});
      if (lsh)
        args.push_back({p + "attn.lsh_rotations",
                        {lsh.getRounds(), Dh, lsh.getBuckets() / 2},
                        /*constant=*/true});
    }
    const int64_t width = rev ? 2 * D : D;
    args.push_back({"final_ln.gamma", {width}});
    args.push_back({"final_ln.beta", {width}});
    args.push_back({"head.w", {width, V}});
    args.push_back({"head.b", {V}});

    OpBuilder b(module.getBodyRegion());
    b.setInsertionPointToEnd(module.getBody());
    Location loc = model.getLoc();
    SmallVector<Type> argTypes;
    for (size_t i = 0; i < args.size(); ++i)
      argTypes.push_back(RankedTensorType::get(
          args[i].shape, i < numInputs ? Type(b.getI32Type()) : Type(b.getF32Type())));
    auto lossType = RankedTensorType::get({}, b.getF32Type());
    auto logitsType = RankedTensorType::get({R, V}, b.getF32Type());
    auto func =
        b.create<func::FuncOp>(loc, ((inference ? "infer_" : "train_") + model.getSymName()).str(),
                               b.getFunctionType(argTypes, {inference ? logitsType : lossType}));
    func->setAttr("attn.model", FlatSymbolRefAttr::get(model.getSymNameAttr()));
    func->setAttr("attn.batch", b.getI64IntegerAttr(batch));
    if (inference)
      func->setAttr("attn.inference", b.getUnitAttr());
    for (size_t i = 0; i < args.size(); ++i) {
      func.setArgAttr(i, i < numInputs ? "attn.input" : "attn.param",
                      b.getStringAttr(args[i].name));
      if (args[i].constant)
        func.setArgAttr(i, "attn.constant", b.getUnitAttr());
    }
    Block *entry = func.addEntryBlock();
    b.setInsertionPointToStart(entry);
    std::map<std::string, Value> arg;
    for (size_t i = 0; i < args.size(); ++i)
      arg[args[i].name] = entry->getArgument(i);
    auto param = [&](int64_t l, const std::string &name) -> Value {
      auto it = arg.find("layers." + std::to_string(l) + "." + name);
      return it == arg.end() ? Value() : it->second;
    };

    GraphBuilder g(b, loc);
    // Values the generated step checks for NaN/Inf, naming them as the
    // runtime does (the first non-finite tensor stops training).
    auto name = [&](Value v, const std::string &what) {
      v.getDefiningOp()->setAttr("attn.name", b.getStringAttr(what));
    };
    // Inference sees the whole model: no residual dropout.
    const double dropout =
        !inference && model.getDropout() ? model.getDropout()->convertToDouble() : 0.0;
    // Residual-branch dropout, keyed like the runtime's (layer, branch).
    auto drop = [&](Value v, int64_t l, int64_t branch) -> Value {
      if (dropout <= 0)
        return v;
      return g.make<DropoutOp>(v.getType(), v, b.getF64FloatAttr(dropout),
                               b.getI64IntegerAttr(0x10000 + 2 * l + branch));
    };
    auto attention = [&](int64_t l, Value z) -> Value {
      Value q = g.splitHeads(g.linear(z, param(l, "attn.wq"), param(l, "attn.bq")), batch, H);
      Value k = variant.getSharedQk()
                    ? q
                    : g.splitHeads(g.linear(z, param(l, "attn.wk"), param(l, "attn.bk")), batch, H);
      Value v = g.splitHeads(g.linear(z, param(l, "attn.wv"), param(l, "attn.bv")), batch, H);
      Value e = layerwise ? arg["lowrank.E"] : param(l, "attn.E");
      auto op = g.make<AttentionOp>(q.getType(), g.f32({batch, H, S}), layer.getAttentionAttr(), q,
                                    k, v, Value(), e, param(l, "attn.F"),
                                    param(l, "attn.lsh_rotations"), param(l, "attn.head_params"));
      return g.linear(g.mergeHeads(op.getOut()), param(l, "attn.wo"), param(l, "attn.bo"));
    };
    auto feedForward = [&](int64_t l, Value z) -> Value {
      Value w1 = param(l, "ffn.w1"), b1 = param(l, "ffn.b1"), w2 = param(l, "ffn.w2"),
            b2 = param(l, "ffn.b2");
      Activation act = layer.getFfnAct().value_or(Activation::gelu);
      auto body = [&](GraphBuilder &gb, Value zc, Value w1c, Value b1c, Value w2c, Value b2c) {
        Value hidden = gb.linear(zc, w1c, b1c);
        hidden = gb.make<ActivationOp>(hidden.getType(), act, hidden);
        return gb.linear(hidden, w2c, b2c);
      };
      if (chunk <= 0 || chunk >= R)
        return body(g, z, w1, b1, w2, b2);
      // Chunked: the intermediate is chunk × d_ff.
      auto op = g.make<RowChunksOp>(TypeRange{z.getType()}, ValueRange{z, w1, b1, w2, b2},
                                    b.getI64IntegerAttr(chunk),
                                    b.getDenseBoolArrayAttr({true, false, false, false, false}),
                                    b.getDenseBoolArrayAttr({false}));
      Block *blk = new Block();
      op.getBody().push_back(blk);
      blk->addArgument(g.f32({chunk, D}), loc);
      for (Value w : {w1, b1, w2, b2})
        blk->addArgument(w.getType(), loc);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(blk);
      GraphBuilder inner(b, loc);
      inner.layer = g.layer;
      Value fc = body(inner, blk->getArgument(0), blk->getArgument(1), blk->getArgument(2),
                      blk->getArgument(3), blk->getArgument(4));
      b.create<ChunksYieldOp>(loc, ValueRange{fc});
      return op.getResult(0);
    };

    Value x = b.create<EmbedOp>(loc, g.f32({R, D}), entry->getArgument(0), arg["tok_emb"],
                                arg["pos_emb"]);
    Value top;
    if (rev) {
      Value x1 = x, x2 = x;
      for (int64_t l = 0; l < L; ++l) {
        g.layer = l;
        // y1 = x1 + Attn(LN(x2)); y2 = x2 + FFN(LN(y1)); the sums tagged
        // for the backward's rebuild.
        auto stream = [&](Value x, Value branch, const char *tag) {
          Value y = g.add(x, branch);
          y.getDefiningOp()->setAttr("attn.rev", b.getStringAttr(tag));
          name(y, "the output of layer " + std::to_string(l) + " (" + tag + ")");
          return y;
        };
        Value a =
            attention(l, g.layerNorm(x2, param(l, "ln1.gamma"), param(l, "ln1.beta")).getResult());
        Value y1 = stream(x1, drop(a, l, 0), "y1");
        Value f = feedForward(
            l, g.layerNorm(y1, param(l, "ln2.gamma"), param(l, "ln2.beta")).getResult());
        x2 = stream(x2, drop(f, l, 1), "y2");
        x1 = y1;
      }
      g.layer = -1;
      top = g.make<ConcatColsOp>(g.f32({R, 2 * D}), x1, x2);
    } else {
      for (int64_t l = 0; l < L; ++l) {
        g.layer = l;
        Value a = drop(
            attention(l, g.layerNorm(x, param(l, "ln1.gamma"), param(l, "ln1.beta")).getResult()),
            l, 0);
        x = g.add(x, a);
        if (ffn)
          x = g.add(
              x,
              drop(feedForward(
                       l, g.layerNorm(x, param(l, "ln2.gamma"), param(l, "ln2.beta")).getResult()),
                   l, 1));
        name(x, "the output of layer " + std::to_string(l));
      }
      g.layer = -1;
      top = x;
    }
    Value zf = g.layerNorm(top, arg["final_ln.gamma"], arg["final_ln.beta"]).getResult();
    Value logits = g.linear(zf, arg["head.w"], arg["head.b"]);
    name(logits, "the logits");
    if (inference) {
      b.create<func::ReturnOp>(loc, ValueRange{logits});
      return success();
    }
    auto ce = b.create<CrossEntropyOp>(loc, lossType, lossType, logits, arg["targets"]);
    b.create<func::ReturnOp>(loc, ValueRange{ce.getLoss()});
    return success();
  }
};

} // namespace
