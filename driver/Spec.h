//===- Spec.h - Loading and checking a spec ---------------------*- C++ -*-===//
//
// The front door of every command: read a .attn file, check it (located
// errors to the reporter), build its attn module; and the small checks and
// reporting every command shares.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_DRIVER_SPEC_H
#define ATTNC_DRIVER_SPEC_H

#include "driver/Report.h"
#include "dsl/AST.h"
#include "passes/Pipelines.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <optional>
#include <string>
#include <vector>

namespace attnc::driver {

/// Reads a whole spec file, refusing directories, missing files and files
/// too large to be a spec (64 MiB); `err` says which.
bool readSpecFile(const std::string &path, std::string &out, std::string &err);

/// What an --arch left out means on every command: the GPU present's
/// architecture, else sm_80.
std::string defaultCudaArch();

/// Checks `--arch`: sm_70 (Volta, with a CUDA 12 NVRTC) and newer have kernels.
bool checkArch(const std::string &arch, std::string &err);

/// From now on, `context`'s diagnostics are written as `file:line:col:
/// kind: msg` to the reporter current on this thread now (driver/Report.h),
/// whichever thread emits them; that reporter must outlive the context.
/// `errorsOnly`: remarks and warnings are dropped (what the training, run,
/// tune and bench commands show; attnc compile and the C ABI show all).
/// Diagnostics do not dump the operation they are about.
void reportDiagnosticsOf(mlir::MLIRContext &context, bool errorsOnly = false);

/// Readies `context` for attn modules: registers the dialects and reports
/// its diagnostics (reportDiagnosticsOf). What buildSpecModule does first,
/// and what the benches do before building their variants by hand.
void prepareContext(mlir::MLIRContext &context, bool errorsOnly = false);

/// The front end alone: parses and checks spec `text` (`where` names it in
/// the located errors, which go to the reporter's diagnostics).
std::optional<ast::Spec> parseSpec(const std::string &text, const std::string &where);

/// A checked spec as an attn module in `context`: registers the dialects
/// and reports the context's diagnostics (reportDiagnosticsOf).
mlir::OwningOpRef<mlir::ModuleOp> buildSpecModule(mlir::MLIRContext &context, const ast::Spec &spec,
                                                  bool errorsOnly = false);

/// The one text-to-module path: parseSpec, then buildSpecModule. Null on
/// failure (errors reported).
mlir::OwningOpRef<mlir::ModuleOp> specModule(mlir::MLIRContext &context, const std::string &text,
                                             const std::string &where, bool errorsOnly = false);

/// Reads the spec at `path` (readSpecFile) and builds its module
/// (specModule, errors only: the commands that load specs this way show
/// the passes' errors, not their remarks). Returns null on failure, after reporting `attnc CMD:
/// error: ...` for an unreadable file. `text`, when given, receives the
/// file's bytes. `given` non-empty is the spec's text (a Session's): no
/// file is read, and `path` only names it in messages.
mlir::OwningOpRef<mlir::ModuleOp> loadSpecModule(const std::string &path, const char *cmd,
                                                 mlir::MLIRContext &context,
                                                 std::string *text = nullptr,
                                                 const std::string &given = "");

/// What a spec's `auto` settings are decided for.
struct ResolveFor {
  /// The kernels' target: whose tile entries of the tuning database apply
  /// (cpu: this CPU's; cuda: any GPU of `arch`).
  std::string target = "cpu";
  std::string arch = "sm_80";
  /// Say each choice and each miss (attn-apply-tuning's notes,
  /// attn-resolve-tunables' remarks).
  bool report = false;
  /// False only for `attnc tune`, which measures what the database will
  /// hold and so starts from the heuristics.
  bool useTuningDb = true;
  /// A run folder's pinned choices, the layer before the database
  /// (attn-apply-tuning's run-choices: model=NAME, KEY=N).
  std::vector<std::string> runChoices;
};

/// Decides every `auto` of `module`, the one way every command and the C
/// ABI do (so `attnc train`, `attnc compile` in every form, the benches,
/// the C ABI and the PyTorch op pick the same tiles, chunks, k and LSH
/// rounds): attn-resolve-pipeline (passes/Pipelines.h) with the tuning
/// database (tuningDbPath()): the target's tiles, the FFN chunk, and low-rank
/// k / LSH rounds and chunk from `attnc tune --max-error`; then the
/// heuristics. False on failure (diagnostics emitted).
bool resolveAuto(mlir::ModuleOp module, const ResolveFor &what);

/// The tuning database every command consults: $ATTNC_TUNING_DB or the
/// user's (runtime/tune/TuningDb.h).
std::string tuningDbPath();

/// SHA-256 of `text` in hex: a spec's identity in checkpoints and artifacts.
std::string sha256Hex(const std::string &text);

} // namespace attnc::driver

#endif // ATTNC_DRIVER_SPEC_H
