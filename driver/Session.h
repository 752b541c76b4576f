//===- Session.h - The driver's facade: one spec, errors as values -*- C++ -*-===//
//
// What a program that embeds attnc's compiler calls (the C ABI does): load
// a spec from a path or its text, decide its `auto` settings, pick an
// attention variant, compile it for a shape and a target, build an
// artifact. Every call returns a value (runtime/Error.h's Status and
// Expected) and prints nothing: the session keeps what the compiler said
// during a call (located spec errors, MLIR diagnostics, notes) and puts it
// in the call's error message; lastWords() holds it after a success.
//
// A session is one spec in its own MLIR context, used by one thread at a
// time; sessions on different threads run at once (docs/design.md, "The
// driver is a library"). The model-level commands run on the session's
// spec too (train, evaluate, generate, fill, tune): what attnc train, eval,
// generate, fill and tune do, with their report kept in lastWords(). The
// tools call the same command functions (Train.h, Tune.h) with a path.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_DRIVER_SESSION_H
#define ATTNC_DRIVER_SESSION_H

#include "driver/ArtifactBuilder.h"
#include "driver/Report.h"
#include "driver/Spec.h"
#include "driver/Train.h"
#include "driver/tune/Tune.h"

#include "codegen/AttentionFunction.h"
#include "dialect/AttnDialect.h"
#include "runtime/CpuAttention.h"
#include "runtime/CudaAttention.h"
#include "runtime/Error.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <functional>
#include <memory>
#include <sstream>
#include <string>

namespace attnc::driver {

class Session {
public:
  /// The spec in the file at `path` (readSpecFile's checks).
  static Expected<std::unique_ptr<Session>> fromFile(const std::string &path);
  /// The spec `text`; `where` names it in located errors.
  static Expected<std::unique_ptr<Session>> fromText(const std::string &text,
                                                     const std::string &where = "<spec>");

  mlir::MLIRContext &context() { return *context_; }
  mlir::ModuleOp module() { return *module_; }
  /// SHA-256 of the spec's text: its identity in checkpoints and artifacts.
  const std::string &specHash() const { return specHash_; }
  /// What the compiler said during the last call.
  std::string lastWords() const;

  /// Decides every `auto` (resolveAuto: the tuning database's layers, then
  /// the heuristics).
  Status resolve(const ResolveFor &what);

  /// The variant named `name`, or ("") the spec's only one.
  Expected<attn::VariantOp> variant(const std::string &name);

  /// `variant` compiled for the CPU at `shape` (host compiler, cached).
  Expected<CpuAttention> compileCpu(attn::VariantOp variant, const codegen::AttentionShape &shape);
  /// `variant` compiled for CUDA `arch` (NVRTC, cached); `emulate`: on the
  /// SIMT emulator; `ordinal`: the GPU (-1: the process's).
  Expected<CudaAttention> compileCuda(attn::VariantOp variant, const codegen::AttentionShape &shape,
                                      const std::string &arch, bool emulate, int ordinal = -1);

  /// The resolved spec as an artifact in memory (buildArtifact).
  Expected<Artifact> artifact(const ArtifactOptions &options);

  // The model-level commands on this session's spec (their options' spec
  // path is replaced by the session's text). Each loads the spec afresh in
  // a context of its own, so resolve() does not change what they see.

  /// attnc train: trains (or with gradCheck, checks gradients); Done,
  /// Interrupted (options.run.stop) or, for a CUDA target without a GPU,
  /// Unavailable.
  Expected<Outcome> train(TrainCliOptions options);
  /// attnc eval: the objective's metric of options.run.out's checkpoint.
  Status evaluate(TrainCliOptions options);
  /// attnc generate: continues options.prompt with a causal model.
  Status generate(TrainCliOptions options);
  /// attnc fill: replaces the mask characters of options.text.
  Status fill(TrainCliOptions options);
  /// attnc tune: measures the spec's tunables into the tuning database.
  Expected<Outcome> tune(TuneOptions options);

private:
  Session();
  /// Starts a call: forgets the last call's words and reports into the
  /// session's own stream until the returned scope ends.
  ScopedReporter beginCall();
  /// `what` failed: the error, with what the compiler said.
  Error failure(const std::string &what) const;
  /// Runs a command function as one call: its outcome, or the error
  /// `what` with what the command said.
  Expected<Outcome> outcomeOf(const std::function<CommandResult()> &run, const char *what);
  Status statusOf(const std::function<mlir::LogicalResult()> &run, const char *what);
  /// `options` with the session's spec in place of a path.
  TrainCliOptions onThisSpec(TrainCliOptions options) const;

  std::ostringstream words_;
  Reporter reporter_;
  std::unique_ptr<mlir::MLIRContext> context_;
  mlir::OwningOpRef<mlir::ModuleOp> module_;
  std::string text_, where_; ///< the spec's text, and what names it
  std::string specHash_;
};

} // namespace attnc::driver

#endif // ATTNC_DRIVER_SESSION_H
