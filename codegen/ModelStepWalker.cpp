//===- ModelStepWalker.cpp - The target-neutral walk of a planned step ----===//
#include "codegen/ModelStepWalker.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace attnc::attn;

namespace attnc::codegen::step {

int64_t numel(Value v) { return llvm::cast<RankedTensorType>(v.getType()).getNumElements(); }
llvm::ArrayRef<int64_t> shapeOf(Value v) {
  return llvm::cast<RankedTensorType>(v.getType()).getShape();
}
/// Elements per row of a [R, ...] value (1 for [R]).
int64_t rowWidth(Value v) {
  auto s = shapeOf(v);
  int64_t n = 1;
  for (size_t i = 1; i < s.size(); ++i)
    n *= s[i];
  return n;
}
bool isI32(Value v) {
  return llvm::cast<RankedTensorType>(v.getType()).getElementType().isInteger(32);
}
std::string f32Literal(double v) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::format("%.9g", v);
  if (os.str().find_first_of(".eEn") == std::string::npos)
    s += ".0";
  return s + "f";
}

llvm::DenseSet<Value> wholeReads(Block::OpListType::iterator begin,
                                 Block::OpListType::iterator end) {
  llvm::DenseSet<Value> whole;
  for (auto it = begin; it != end; ++it)
    for (OpOperand &use : it->getOpOperands())
      if (readsWhole(&*it, use.getOperandNumber()))
        whole.insert(use.get());
  return whole;
}

bool readsWhole(Operation *op, unsigned operand) {
  if (llvm::isa<EmbedOp>(op))
    return operand >= 1;
  if (llvm::isa<LayerNormOp>(op))
    return operand >= 1;
  if (llvm::isa<LayerNormGradOp>(op))
    return operand == 2;
  if (llvm::isa<BiasAddOp>(op))
    return operand == 1;
  return false;
}

FailureOr<std::string> StepWalker::run() {
  Block &entry = func.getBody().front();
  for (BlockArgument a : entry.getArguments())
    names[a] =
        llvm::formatv("(({0} *)args[{1}])", isI32(a) ? "int32_t" : "float", a.getArgNumber()).str();
  std::string body;
  llvm::raw_string_ostream os(body);
  for (Operation &op : entry)
    if (failed(emitTop(&op, os)))
      return failure();
  return source(os.str());
}

int StepWalker::gradSlot(Value v) {
  auto ret = llvm::cast<func::ReturnOp>(func.getBody().front().getTerminator());
  for (unsigned i = 1; i < ret.getNumOperands(); ++i)
    if (ret.getOperand(i) == v)
      return int(i - 1);
  return -1;
}

LogicalResult StepWalker::place(Operation *op, llvm::raw_ostream &os, const char *prefix) {
  auto offsets = op->getAttrOfType<DenseI64ArrayAttr>("attn.arena_offsets");
  if (!offsets || offsets.size() != int64_t(op->getNumResults()))
    return op->emitOpError("has no memory plan (run attn-plan-memory first)");
  for (auto [r, off] : llvm::zip(op->getResults(), offsets.asArrayRef())) {
    if (off < 0) {
      // A returned gradient goes straight into the runtime's buffer.
      if (int slot = gradSlot(r); slot >= 0) {
        names[r] = "grads[" + std::to_string(slot) + "]";
        continue;
      }
      return op->emitOpError("result #") << r.getResultNumber() << " was not placed";
    }
    std::string n = fresh(prefix);
    os << "  " << (isI32(r) ? "int32_t" : "float") << " *" << n << " = ("
       << (isI32(r) ? "int32_t" : "float") << " *)(arena + " << off << ");\n";
    names[r] = n;
  }
  return success();
}

LogicalResult StepWalker::emitTop(Operation *op, llvm::raw_ostream &os) {
  if (auto ret = llvm::dyn_cast<func::ReturnOp>(op)) {
    emitReturn(ret, os);
    return success();
  }
  if (auto c = llvm::dyn_cast<ConstantOp>(op)) {
    emitConstant(c, os);
    return success();
  }
  if (failed(place(op, os)))
    return failure();
  if (failed(emitOp(
          op, os, /*rows=*/[](Value v) { return std::to_string(shapeOf(v)[0]); }, "0")))
    return failure();
  checkFinite(op, os);
  handOverFinished(op, os);
  return success();
}

void StepWalker::handOverFinished(Operation *op, llvm::raw_ostream &os) {
  if (inference())
    return;
  auto ret = llvm::cast<func::ReturnOp>(func.getBody().front().getTerminator());
  for (unsigned i = 1; i < ret.getNumOperands(); ++i)
    if (ret.getOperand(i).getDefiningOp() == op && handedOver.insert(i - 1).second)
      emitHandOver(i - 1, ret.getOperand(i), os);
}

void StepWalker::handOverRest(func::ReturnOp ret, llvm::raw_ostream &os) {
  for (unsigned i = 1; i < ret.getNumOperands(); ++i)
    if (handedOver.insert(i - 1).second)
      emitHandOver(i - 1, ret.getOperand(i), os);
}

void StepWalker::checkFinite(Operation *op, llvm::raw_ostream &os) {
  SmallVector<std::pair<Value, StringRef>> named;
  if (auto n = op->getAttrOfType<StringAttr>("attn.name"))
    named.push_back({op->getResult(0), n.getValue()});
  if (auto names = op->getAttrOfType<ArrayAttr>("attn.result_names"))
    for (auto [r, n] : llvm::zip(op->getResults(), names))
      if (auto s = llvm::dyn_cast<StringAttr>(n); s && !s.getValue().empty())
        named.push_back({r, s.getValue()});
  for (auto [v, what] : named)
    emitCheck(v, what, os);
}

LogicalResult StepWalker::emitOp(Operation *op, llvm::raw_ostream &os, const RowsFn &rows,
                                 const std::string &row0) {
  if (auto fr = llvm::dyn_cast<FusedRowsOp>(op))
    return emitFusedRows(fr, os, rows(fr.getResult(0)), row0);
  if (auto rc = llvm::dyn_cast<RowChunksOp>(op))
    return rowChunks(rc, os);
  if (isRowLocal(op)) // attn-fuse-rows puts every one in a kernel
    return op->emitOpError("outside attn.fused_rows (run attn-fuse-rows first)");
  if (auto mm = llvm::dyn_cast<MatmulOp>(op)) {
    auto ls = shapeOf(mm.getLhs());
    bool ta = mm.getTransposeA();
    // A row-split dimension (M, or K when the lhs is transposed) is the
    // chunk's row count inside a body.
    std::string M = ta ? std::to_string(ls[1]) : rows(mm.getLhs());
    std::string K = ta ? rows(mm.getLhs()) : std::to_string(ls[1]);
    std::string N = std::to_string(shapeOf(mm.getResult())[1]);
    emitGemm(ta, mm.getTransposeB(), M, N, K, mm.getLhs(), mm.getRhs(), mm.getResult(), os);
    return success();
  }
  if (llvm::isa<AttentionOp, AttentionGradOp>(op))
    return emitAttention(op, os);
  return emitRowsOp(op, os, rows);
}

LogicalResult StepWalker::emitAttention(Operation *op, llvm::raw_ostream &os) {
  auto n = [&](Value v) { return name(v); };
  auto opt = [&](Value v) { return v ? n(v) : std::string("nullptr"); };
  auto layerOf = [](Operation *o) {
    auto a = o->getAttrOfType<IntegerAttr>("attn.layer");
    return a ? a.getInt() : 0;
  };
  if (auto at = llvm::dyn_cast<AttentionOp>(op)) {
    os << "  {\n    const float *in[7] = {" << n(at.getQuery()) << ", " << n(at.getKey()) << ", "
       << n(at.getValue()) << ", " << opt(at.getProjE()) << ", " << opt(at.getProjF()) << ", "
       << opt(at.getRotations()) << ", " << opt(at.getParams()) << "};\n"
       << "    if (int e = env->attention(env->ctx, " << layerOf(op) << ", in, " << n(at.getOut())
       << ", " << n(at.getLse()) << ")) return e;\n  }\n";
    return success();
  }
  if (auto ag = llvm::dyn_cast<AttentionGradOp>(op)) {
    std::string pg[3] = {"nullptr", "nullptr", "nullptr"};
    unsigned i = 0, slot = 0;
    for (Value p : {ag.getProjE(), ag.getProjF(), ag.getParams()}) {
      if (p)
        pg[slot] = n(ag.getParamGrads()[i++]);
      ++slot;
    }
    os << "  {\n    const float *in[10] = {" << n(ag.getQuery()) << ", " << n(ag.getKey()) << ", "
       << n(ag.getValue()) << ", " << n(ag.getOut()) << ", " << n(ag.getLse()) << ", "
       << n(ag.getDout()) << ", " << opt(ag.getProjE()) << ", " << opt(ag.getProjF()) << ", "
       << opt(ag.getRotations()) << ", " << opt(ag.getParams()) << "};\n"
       << "    float *out[6] = {" << n(ag.getDquery()) << ", " << n(ag.getDkey()) << ", "
       << n(ag.getDvalue()) << ", " << pg[0] << ", " << pg[1] << ", " << pg[2] << "};\n"
       << "    if (int e = env->attention_grad(env->ctx, " << ag.getLayer() << ", in, out)) "
       << "return e;\n  }\n";
    return success();
  }
  return op->emitOpError("is not an attention op");
}

LogicalResult StepWalker::rowStatements(Operation *op, llvm::raw_ostream &os, const RowPtrFn &ptr,
                                        const std::string &row0) {
  auto row = [&](Value v) { return ptr(v, false); };
  auto whole = [&](Value v) { return ptr(v, true); };
  // A column loop (the target's: all columns in order, or a block's threads
  // striding them and a barrier so the next statement may read any column).
  const char *barrier = this->barrier();
  auto loop = [&](Value out, const std::string &expr) {
    os << "      " << columns(rowWidth(out)) << row(out) << "[c] = " << expr << ";\n" << barrier;
  };
  if (auto e = llvm::dyn_cast<EmbedOp>(op)) {
    int64_t S = shapeOf(e.getPositions())[0], C = rowWidth(e.getResult());
    os << "      { const " << indexType() << " t = " << row(e.getTokens()) << "[0], s = (" << row0
       << " + r) % " << S << ";\n";
    os << "        " << columns(C) << row(e.getResult()) << "[c] = " << whole(e.getTable())
       << "[t * " << C << " + c] + " << whole(e.getPositions()) << "[s * " << C << " + c]; }\n"
       << barrier;
    return success();
  }
  // The row helpers of the CUDA step reduce across the block in sm.red.
  const char *red = reduction();
  if (auto ln = llvm::dyn_cast<LayerNormOp>(op)) {
    os << "      layerNormRow(" << row(ln.getInput()) << ", " << whole(ln.getGamma()) << ", "
       << whole(ln.getBeta()) << ", " << row(ln.getResult()) << ", " << row(ln.getMean()) << ", "
       << row(ln.getRstd()) << ", " << rowWidth(ln.getInput()) << ", "
       << llvm::formatv("{0:e}", ln.getEps().convertToDouble()).str() << red << ");\n"
       << barrier;
    return success();
  }
  if (auto lg = llvm::dyn_cast<LayerNormGradOp>(op)) {
    os << "      layerNormGradRow(" << row(lg.getDy()) << ", " << row(lg.getInput()) << ", "
       << whole(lg.getGamma()) << ", " << row(lg.getMean()) << "[0], " << row(lg.getRstd())
       << "[0], " << row(lg.getDx()) << ", " << rowWidth(lg.getDy()) << red << ");\n"
       << barrier;
    return success();
  }
  if (auto ba = llvm::dyn_cast<BiasAddOp>(op)) {
    loop(ba.getResult(), row(ba.getInput()) + "[c] + " + whole(ba.getBias()) + "[c]");
    return success();
  }
  if (auto a = llvm::dyn_cast<AddOp>(op)) {
    loop(a.getResult(), row(a.getLhs()) + "[c] + " + row(a.getRhs()) + "[c]");
    return success();
  }
  if (auto s = llvm::dyn_cast<SubOp>(op)) {
    loop(s.getResult(), row(s.getLhs()) + "[c] - " + row(s.getRhs()) + "[c]");
    return success();
  }
  if (auto act = llvm::dyn_cast<ActivationOp>(op)) {
    loop(act.getResult(),
         "activation(" + std::to_string(int(act.getKind())) + ", " + row(act.getInput()) + "[c])");
    return success();
  }
  if (auto ag = llvm::dyn_cast<ActivationGradOp>(op)) {
    loop(ag.getResult(), "activationGrad(" + std::to_string(int(ag.getKind())) + ", " +
                             row(ag.getInput()) + "[c]) * " + row(ag.getDy()) + "[c]");
    return success();
  }
  if (auto d = llvm::dyn_cast<DropoutOp>(op)) {
    double p = d.getRate().convertToDouble();
    int64_t C = rowWidth(d.getResult());
    std::string idx = "(unsigned long long)((" + row0 + " + r) * " + std::to_string(C) + " + c)";
    loop(d.getResult(), dropoutElement(row(d.getInput()), d.getStream(), idx, p));
    return success();
  }
  if (auto cc = llvm::dyn_cast<ConcatColsOp>(op)) {
    int64_t A = rowWidth(cc.getLhs());
    loop(cc.getResult(), "c < " + std::to_string(A) + " ? " + row(cc.getLhs()) +
                             "[c] : " + row(cc.getRhs()) + "[c - " + std::to_string(A) + "]");
    return success();
  }
  if (auto sc = llvm::dyn_cast<SliceColsOp>(op)) {
    loop(sc.getResult(), row(sc.getInput()) + "[c + " + std::to_string(sc.getOffset()) + "]");
    return success();
  }
  return op->emitOpError("is not a row-local op");
}

LogicalResult StepWalker::rowChunks(RowChunksOp rc, llvm::raw_ostream &os) {
  Block &body = rc.getBody().front();
  auto yield = llvm::cast<ChunksYieldOp>(body.getTerminator());
  const int64_t R = shapeOf(rc.getInputs()[0])[0], chunk = rc.getChunk();
  for (auto [i, r] : llvm::enumerate(rc.getResults()))
    if (rc.getSums()[i])
      emitZero(r, os);
  os << "  for (int64_t c0 = 0; c0 < " << R << "; c0 += " << chunk << ") {\n"
     << "  const int64_t m = std::min<int64_t>(" << chunk << ", " << R << " - c0);\n";
  // Row-split values (their first dimension is the chunk's rows).
  llvm::DenseSet<Value> split;
  for (auto [i, a] : llvm::enumerate(body.getArguments())) {
    std::string n = fresh("a");
    Value in = rc.getInputs()[i];
    if (rc.getSplit()[i]) {
      split.insert(a);
      os << "  float *" << n << " = (float *)" << name(in) << " + c0 * " << rowWidth(in) << ";\n";
    } else {
      os << "  float *" << n << " = (float *)" << name(in) << ";\n";
    }
    names[a] = n;
  }
  for (Operation &op : body.without_terminator()) {
    // The body's values are in the op's planned scratch.
    if (failed(place(&op, os, "b")))
      return failure();
    // Which results are rows of the chunk. Only ops whose row handling
    // is known here may appear in a chunked body (the FFN and its
    // backward): elementwise ones keep their operands' rows, a GEMM's
    // result has the chunk's rows when its lhs does untransposed, a
    // column sum reduces them.
    bool rowsIn = llvm::any_of(op.getOperands(), [&](Value v) { return split.contains(v); });
    if (auto mm = llvm::dyn_cast<MatmulOp>(&op)) {
      if (mm.getTransposeB() && split.contains(mm.getRhs()))
        return mm.emitOpError("with a chunk-split transposed rhs cannot be emitted in a "
                              "chunked body");
      rowsIn = split.contains(mm.getLhs()) && !mm.getTransposeA();
    } else if (llvm::isa<ColumnSumOp>(op)) {
      rowsIn = false;
    } else if (!llvm::isa<FusedRowsOp>(op)) {
      return op.emitOpError("cannot be emitted inside attn.row_chunks (only GEMMs, column sums "
                            "and fused row kernels are)");
    }
    if (rowsIn)
      for (Value r : op.getResults())
        split.insert(r);
    auto rows = [&](Value v) {
      return split.contains(v) ? std::string("m") : std::to_string(shapeOf(v)[0]);
    };
    if (failed(emitOp(&op, os, rows, "c0")))
      return failure();
  }
  for (auto [i, v] : llvm::enumerate(yield.getValues()))
    emitChunkResult(rc.getResult(i), v, rc.getSums()[i], os);
  os << "  }\n";
  return success();
}

} // namespace attnc::codegen::step
