//===- ModelStepWalker.h - The target-neutral walk of a planned step -*- C++ -*-===//
//
// What both model-step targets share (codegen/ModelEmitter.h is the public
// face): the walk over a planned @train_<model> / @infer_<model> function in
// program order, every value named by its arena offset, gradients placed in
// the runtime's buffers, the row statements of fused row kernels, and the
// loop over a chunked body's rows. A target (ModelEmitterCpu.cpp,
// ModelEmitterCuda.cpp) says how each piece is spelt: a C++ loop or a
// block's threads, a library call or a fixed kernel launch, a copy or an
// env call. Internal to codegen/.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_MODELSTEPWALKER_H
#define ATTNC_CODEGEN_MODELSTEPWALKER_H

#include "dialect/AttnDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <string>

namespace attnc::codegen::step {

int64_t numel(mlir::Value v);
llvm::ArrayRef<int64_t> shapeOf(mlir::Value v);
/// Elements per row of a [R, ...] value (1 for [R]).
int64_t rowWidth(mlir::Value v);
bool isI32(mlir::Value v);
/// `v` as a C++ float literal ("0.5f", "1.0f").
std::string f32Literal(double v);
/// Whether a row-local op reads operand `operand` whole (parameters,
/// tables) rather than row by row.
bool readsWhole(mlir::Operation *op, unsigned operand);
/// The values `ops` read whole (any use reading it whole).
llvm::DenseSet<mlir::Value> wholeReads(mlir::Block::OpListType::iterator begin,
                                       mlir::Block::OpListType::iterator end);
template <class Ops> llvm::DenseSet<mlir::Value> wholeReads(Ops &&ops) {
  return wholeReads(ops.begin(), ops.end());
}

/// The walk. `run()` emits the function's body in program order through
/// the target's hooks and returns the target's whole source.
class StepWalker {
public:
  explicit StepWalker(mlir::func::FuncOp func) : func(func) {}
  virtual ~StepWalker() = default;

  mlir::FailureOr<std::string> run();
  /// The entry point's name.
  virtual std::string symbol() = 0;

protected:
  /// The row count expression of a value (a chunk's `m` inside
  /// attn.row_chunks).
  using RowsFn = std::function<std::string(mlir::Value)>;
  /// The pointer to value v's current row, or (whole) to v's base.
  using RowPtrFn = std::function<std::string(mlir::Value, bool whole)>;

  // What a target spells.
  /// The whole source around the emitted body.
  virtual std::string source(const std::string &body) = 0;
  /// The return: the loss and gradients (or the logits) to the runtime.
  virtual void emitReturn(mlir::func::ReturnOp ret, llvm::raw_ostream &os) = 0;
  virtual void emitConstant(attn::ConstantOp c, llvm::raw_ostream &os) = 0;
  /// The NaN/Inf check of a named value.
  virtual void emitCheck(mlir::Value v, llvm::StringRef what, llvm::raw_ostream &os) = 0;
  /// Gradient `slot` (the value `g`) is final: into the runtime's
  /// grads[slot] unless it was computed there, then reported through
  /// env->grad_ready, so a data-parallel run can exchange it while the rest
  /// of the backward runs. The walk calls it once per gradient, right
  /// after the top-level op that finishes it (handOverRest: the others).
  virtual void emitHandOver(unsigned slot, mlir::Value g, llvm::raw_ostream &os) = 0;
  /// A GEMM through the env.
  virtual void emitGemm(bool ta, bool tb, const std::string &M, const std::string &N,
                        const std::string &K, mlir::Value lhs, mlir::Value rhs, mlir::Value out,
                        llvm::raw_ostream &os) = 0;
  /// An op that is neither row-local, a GEMM nor attention (sums over rows,
  /// heads, the loss): a runtime routine or a fixed kernel.
  virtual mlir::LogicalResult emitRowsOp(mlir::Operation *op, llvm::raw_ostream &os,
                                         const RowsFn &rows) = 0;
  /// An attn.fused_rows over `rows` rows from absolute row `row0`.
  virtual mlir::LogicalResult emitFusedRows(attn::FusedRowsOp fr, llvm::raw_ostream &os,
                                            const std::string &rows, const std::string &row0) = 0;
  /// A chunked body's summed result zeroed before the chunks.
  virtual void emitZero(mlir::Value r, llvm::raw_ostream &os) = 0;
  /// After a chunk: its rows of `v` copied into `r`, or (sum) `v` added to `r`.
  virtual void emitChunkResult(mlir::Value r, mlir::Value v, bool sum, llvm::raw_ostream &os) = 0;
  /// Row statements: a loop over `width` columns (its head), what ends a
  /// statement (a barrier on CUDA), the 64-bit index type, the reduction
  /// scratch argument of the row helpers, and a dropout element.
  virtual std::string columns(int64_t width) = 0;
  virtual const char *barrier() = 0;
  virtual const char *indexType() = 0;
  virtual const char *reduction() = 0;
  virtual std::string dropoutElement(const std::string &input, int64_t stream,
                                     const std::string &index, double p) = 0;

  // Shared by the targets.
  /// @infer_<model>: returns the logits, has no gradients.
  bool inference() const { return func->hasAttr("attn.inference"); }
  /// The gradient slot `v` is returned in (its operand number − 1: the loss
  /// comes first), or -1.
  int gradSlot(mlir::Value v);
  std::string fresh(const char *prefix) { return prefix + std::to_string(counter++); }
  std::string name(mlir::Value v) { return names.lookup(v); }
  /// At the return: the hand-over of every gradient not handed over yet.
  void handOverRest(mlir::func::ReturnOp ret, llvm::raw_ostream &os);
  /// The statements computing one row of a row-local op.
  mlir::LogicalResult rowStatements(mlir::Operation *op, llvm::raw_ostream &os, const RowPtrFn &ptr,
                                    const std::string &row0);

  mlir::func::FuncOp func;
  llvm::DenseMap<mlir::Value, std::string> names; ///< pointer expression of values in memory
  int counter = 0;

private:
  /// Gives each result of `op` its planned arena pointer, named `prefix`N
  /// (v: top-level values, b: a chunked body's).
  mlir::LogicalResult place(mlir::Operation *op, llvm::raw_ostream &os, const char *prefix = "v");
  mlir::LogicalResult emitTop(mlir::Operation *op, llvm::raw_ostream &os);
  /// The checks of the values attn-expand-model named (attn.name, or
  /// attn.result_names once fused).
  void checkFinite(mlir::Operation *op, llvm::raw_ostream &os);
  /// The hand-overs of the gradients `op` finishes (training steps only).
  void handOverFinished(mlir::Operation *op, llvm::raw_ostream &os);
  llvm::DenseSet<unsigned> handedOver; ///< gradient slots already handed over
  /// Emits a non-fused op whose values all have names; `row0` is the
  /// absolute index of its first row.
  mlir::LogicalResult emitOp(mlir::Operation *op, llvm::raw_ostream &os, const RowsFn &rows,
                             const std::string &row0);
  mlir::LogicalResult emitAttention(mlir::Operation *op, llvm::raw_ostream &os);
  /// An attn.row_chunks: the body once per chunk of rows, its values in the
  /// op's planned scratch; row results copied out, sums accumulated.
  mlir::LogicalResult rowChunks(attn::RowChunksOp rc, llvm::raw_ostream &os);
};

} // namespace attnc::codegen::step

#endif // ATTNC_CODEGEN_MODELSTEPWALKER_H
