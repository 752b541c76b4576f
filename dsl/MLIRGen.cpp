//===- MLIRGen.cpp - Lower a checked spec to the attn dialect -------------===//
//
// Like Toy's MLIRGen: one builder, locations from the AST, verification at
// the end. Score and mask expressions become arith/math ops inside the
// variant's regions; Sema's expression types drive the conversions
// (int → index, float → f32, bool → i1).
//
//===----------------------------------------------------------------------===//
#include "dsl/MLIRGen.h"
#include "dialect/TrainBlock.h"
#include "dialect/AttnDialect.h"
#include "dsl/Sema.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"

using namespace mlir;

namespace attnc {

using namespace ast;

namespace {

class MLIRGenImpl {
public:
  explicit MLIRGenImpl(MLIRContext &ctx) : builder(&ctx) {}

  OwningOpRef<ModuleOp> gen(const Spec &spec) {
    Location loc =
        spec.attentions.empty() ? loc_(spec.models.front().loc) : loc_(spec.attentions.front().loc);
    OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
    builder.setInsertionPointToEnd(module->getBody());
    for (const AttentionDecl &a : spec.attentions)
      genVariant(a);
    for (const ModelDecl &m : spec.models)
      genModel(m);
    if (failed(verify(*module)))
      return nullptr;
    return module;
  }

private:
  Location loc_(const SourceLoc &l) {
    return FileLineColLoc::get(builder.getStringAttr(l.file ? *l.file : "<unknown>"), l.line,
                               l.col);
  }

  int64_t tunable(const Tunable &t) { return t.isAuto ? attn::kAuto : t.value; }

  void genVariant(const AttentionDecl &a) {
    MLIRContext *ctx = builder.getContext();
    auto op = builder.create<attn::VariantOp>(
        loc_(a.loc), a.name, /*lowrank=*/nullptr, /*lsh=*/nullptr,
        /*shared_qk=*/a.sharedQK, /*causal=*/a.causal, /*key_padding=*/a.keyPadding,
        /*scale=*/nullptr, /*dropout=*/nullptr, /*params=*/nullptr,
        attn::TileAttr::get(ctx, tunable(a.tile.blockQ), tunable(a.tile.blockKv),
                            tunable(a.tile.warps), tunable(a.tile.stages)));
    if (a.kv == KvKind::LowRank)
      op.setLowrankAttr(attn::LowRankAttr::get(ctx, tunable(a.lowRank.k),
                                               static_cast<attn::ShareMode>(a.lowRank.share)));
    if (a.lsh) {
      const Lsh &l = *a.lsh;
      op.setLshAttr(attn::LshAttr::get(ctx, tunable(l.buckets), tunable(l.rounds), tunable(l.chunk),
                                       l.before, l.after, l.seed, l.denseFallback));
    }
    if (a.scale)
      op.setScaleAttr(builder.getF64FloatAttr(*a.scale));
    if (a.dropout > 0)
      op.setDropoutAttr(builder.getF64FloatAttr(a.dropout));
    if (!a.params.empty()) {
      SmallVector<Attribute> params;
      for (const HeadParam &p : a.params)
        params.push_back(attn::HeadParamAttr::get(
            ctx, p.name,
            p.init == HeadParam::Init::Alibi ? attn::ParamInit::alibi : attn::ParamInit::constant,
            llvm::APFloat(p.value), p.learned));
      op.setParamsAttr(builder.getArrayAttr(params));
    }

    OpBuilder::InsertionGuard guard(builder);
    Type f32 = builder.getF32Type(), idx = builder.getIndexType();
    if (a.score) {
      Block *block = builder.createBlock(&op.getScore());
      Location l = loc_(a.score->loc);
      block->addArguments({f32, idx, idx, idx, idx}, {l, l, l, l, l});
      vars = {{"s", block->getArgument(0)},
              {"b", block->getArgument(1)},
              {"h", block->getArgument(2)},
              {"q", block->getArgument(3)},
              {"kv", block->getArgument(4)}};
      Value v = convert(genExpr(*a.score), a.score->type, ExprType::Float, l);
      builder.create<attn::YieldOp>(l, v);
    }
    if (!a.masks.empty()) {
      Block *block = builder.createBlock(&op.getMask());
      Location l = loc_(a.masks.front()->loc);
      block->addArguments({idx, idx, idx, idx}, {l, l, l, l});
      vars = {{"b", block->getArgument(0)},
              {"h", block->getArgument(1)},
              {"q", block->getArgument(2)},
              {"kv", block->getArgument(3)}};
      Value keep;
      for (const ExprPtr &m : a.masks) {
        Value v = genExpr(*m);
        keep = keep ? builder.create<arith::AndIOp>(loc_(m->loc), keep, v).getResult() : v;
      }
      builder.create<attn::YieldOp>(l, keep);
    }
  }

  /// Converts a value of Sema type `from` to `to` (only int → float widens).
  Value convert(Value v, ExprType from, ExprType to, Location loc) {
    if (from == to || to != ExprType::Float || from != ExprType::Int)
      return v;
    Value i64 = builder.create<arith::IndexCastOp>(loc, builder.getI64Type(), v);
    return builder.create<arith::SIToFPOp>(loc, builder.getF32Type(), i64);
  }

  Value genExpr(const Expr &e) {
    Location loc = loc_(e.loc);
    switch (e.kind) {
    case ExprKind::IntLit:
      return builder.create<arith::ConstantIndexOp>(loc, e.intValue);
    case ExprKind::FloatLit:
      return builder.create<arith::ConstantOp>(
          loc, builder.getF32FloatAttr(static_cast<float>(e.floatValue)));
    case ExprKind::BoolLit:
      return builder.create<arith::ConstantOp>(loc, builder.getBoolAttr(e.intValue != 0));
    case ExprKind::Var:
      return vars.lookup(e.name);
    case ExprKind::Unary: {
      Value x = genExpr(*e.args[0]);
      if (e.name == "!")
        return builder.create<arith::XOrIOp>(
            loc, x, builder.create<arith::ConstantOp>(loc, builder.getBoolAttr(true)));
      if (e.type == ExprType::Float)
        return builder.create<arith::NegFOp>(loc, x);
      return builder.create<arith::SubIOp>(loc, builder.create<arith::ConstantIndexOp>(loc, 0), x);
    }
    case ExprKind::Binary:
      return genBinary(e, loc);
    case ExprKind::Select:
      return genSelect(e, loc);
    case ExprKind::Call:
      return genCall(e, loc);
    }
    return nullptr;
  }

  /// Generates both operands of `e`, promoted to a common type; returns it.
  ExprType genOperands(const Expr &e, size_t first, Value &a, Value &b, Location loc) {
    ExprType ta = e.args[first]->type, tb = e.args[first + 1]->type;
    ExprType common = (ta == ExprType::Float || tb == ExprType::Float) ? ExprType::Float
                      : ta == ExprType::Bool                           ? ExprType::Bool
                                                                       : ExprType::Int;
    a = convert(genExpr(*e.args[first]), ta, common, loc);
    b = convert(genExpr(*e.args[first + 1]), tb, common, loc);
    return common;
  }

  Value genBinary(const Expr &e, Location loc) {
    Value a, b;
    ExprType t = genOperands(e, 0, a, b, loc);
    const std::string &op = e.name;
    if (op == "&&")
      return builder.create<arith::AndIOp>(loc, a, b);
    if (op == "||")
      return builder.create<arith::OrIOp>(loc, a, b);
    if (op == "==" || op == "!=" || op == "<" || op == "<=" || op == ">" || op == ">=") {
      if (t == ExprType::Float) {
        auto pred = op == "=="   ? arith::CmpFPredicate::OEQ
                    : op == "!=" ? arith::CmpFPredicate::UNE
                    : op == "<"  ? arith::CmpFPredicate::OLT
                    : op == "<=" ? arith::CmpFPredicate::OLE
                    : op == ">"  ? arith::CmpFPredicate::OGT
                                 : arith::CmpFPredicate::OGE;
        return builder.create<arith::CmpFOp>(loc, pred, a, b);
      }
      auto pred = op == "=="   ? arith::CmpIPredicate::eq
                  : op == "!=" ? arith::CmpIPredicate::ne
                  : op == "<"  ? arith::CmpIPredicate::slt
                  : op == "<=" ? arith::CmpIPredicate::sle
                  : op == ">"  ? arith::CmpIPredicate::sgt
                               : arith::CmpIPredicate::sge;
      return builder.create<arith::CmpIOp>(loc, pred, a, b);
    }
    if (t == ExprType::Float) {
      if (op == "+")
        return builder.create<arith::AddFOp>(loc, a, b);
      if (op == "-")
        return builder.create<arith::SubFOp>(loc, a, b);
      if (op == "*")
        return builder.create<arith::MulFOp>(loc, a, b);
      return builder.create<arith::DivFOp>(loc, a, b);
    }
    if (op == "+")
      return builder.create<arith::AddIOp>(loc, a, b);
    if (op == "-")
      return builder.create<arith::SubIOp>(loc, a, b);
    if (op == "*")
      return builder.create<arith::MulIOp>(loc, a, b);
    // x / 0 and x % 0 are defined as 0: divsi/remsi by zero would be UB.
    Value zero = builder.create<arith::ConstantIndexOp>(loc, 0);
    Value one = builder.create<arith::ConstantIndexOp>(loc, 1);
    Value isZero = builder.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, b, zero);
    Value safe = builder.create<arith::SelectOp>(loc, isZero, one, b);
    Value r = op == "/" ? builder.create<arith::DivSIOp>(loc, a, safe).getResult()
                        : builder.create<arith::RemSIOp>(loc, a, safe).getResult();
    return builder.create<arith::SelectOp>(loc, isZero, zero, r);
  }

  Value genSelect(const Expr &e, Location loc) {
    Value c = genExpr(*e.args[0]);
    Value a, b;
    genOperands(e, 1, a, b, loc);
    return builder.create<arith::SelectOp>(loc, c, a, b);
  }

  Value genCall(const Expr &e, Location loc) {
    if (e.name == "where")
      return genSelect(e, loc);
    if (!isBuiltinFunction(e.name)) { // a per-head parameter
      Value head = genExpr(*e.args[0]);
      return builder.create<attn::HeadParamOp>(loc, builder.getF32Type(),
                                               builder.getStringAttr(e.name), head);
    }
    if (e.name == "min" || e.name == "max") {
      Value a, b;
      ExprType t = genOperands(e, 0, a, b, loc);
      if (t == ExprType::Float)
        return e.name == "min" ? builder.create<arith::MinimumFOp>(loc, a, b).getResult()
                               : builder.create<arith::MaximumFOp>(loc, a, b).getResult();
      return e.name == "min" ? builder.create<arith::MinSIOp>(loc, a, b).getResult()
                             : builder.create<arith::MaxSIOp>(loc, a, b).getResult();
    }
    ExprType argType = e.args[0]->type;
    Value x = genExpr(*e.args[0]);
    if (e.name == "abs")
      return argType == ExprType::Float ? builder.create<math::AbsFOp>(loc, x).getResult()
                                        : builder.create<math::AbsIOp>(loc, x).getResult();
    x = convert(x, argType, ExprType::Float, loc);
    if (e.name == "float")
      return x;
    if (e.name == "exp")
      return builder.create<math::ExpOp>(loc, x);
    if (e.name == "log")
      return builder.create<math::LogOp>(loc, x);
    if (e.name == "sqrt")
      return builder.create<math::SqrtOp>(loc, x);
    if (e.name == "tanh")
      return builder.create<math::TanhOp>(loc, x);
    // sigmoid(x) = 1 / (1 + exp(-x))
    Value one = builder.create<arith::ConstantOp>(loc, builder.getF32FloatAttr(1.0f));
    Value ex = builder.create<math::ExpOp>(loc, builder.create<arith::NegFOp>(loc, x));
    return builder.create<arith::DivFOp>(loc, one, builder.create<arith::AddFOp>(loc, one, ex));
  }

  void genModel(const ModelDecl &m) {
    auto op = builder.create<attn::ModelOp>(
        loc_(m.loc), m.name, m.vocab.value, m.seq.value, m.dModel.value, m.heads.value, m.dFf.value,
        m.layers.value, static_cast<attn::DType>(m.dtype),
        static_cast<attn::Objective>(m.objective),
        m.dropout > 0 ? builder.getF64FloatAttr(m.dropout) : FloatAttr(),
        /*train=*/DictionaryAttr());
    if (m.train.present) {
      // The recommended training settings: whole numbers as i64, the rest f64.
      SmallVector<NamedAttribute> settings;
      for (const TrainSettingInfo &info : kTrainSettings)
        if (const Setting *s = m.train.setting(info.key); s->present)
          settings.push_back(builder.getNamedAttr(
              info.key, info.integer ? Attribute(builder.getI64IntegerAttr(int64_t(s->value)))
                                     : Attribute(builder.getF64FloatAttr(s->value))));
      op.setTrainAttr(builder.getDictionaryAttr(settings));
    }
    OpBuilder::InsertionGuard guard(builder);
    builder.createBlock(&op.getBody());
    for (const LayerDecl &l : m.layerDecls) {
      auto layer = builder.create<attn::LayerOp>(
          loc_(l.loc), FlatSymbolRefAttr::get(builder.getContext(), l.attention),
          l.reversible ? builder.getUnitAttr() : UnitAttr(), /*ffn_act=*/nullptr,
          /*ffn_chunk=*/nullptr);
      if (l.ffn) {
        layer.setFfnActAttr(attn::ActivationAttr::get(builder.getContext(),
                                                      static_cast<attn::Activation>(l.ffn->act)));
        layer.setFfnChunkAttr(builder.getI64IntegerAttr(tunable(l.ffn->chunk)));
      }
    }
  }

  OpBuilder builder;
  llvm::StringMap<Value> vars;
};

} // namespace

OwningOpRef<ModuleOp> mlirGen(MLIRContext &context, const Spec &spec) {
  return MLIRGenImpl(context).gen(spec);
}

void registerAttncDialects(MLIRContext &context) {
  DialectRegistry registry;
  registry.insert<attn::AttnDialect, arith::ArithDialect, math::MathDialect, func::FuncDialect>();
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
}

} // namespace attnc
