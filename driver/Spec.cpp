//===- Spec.cpp - Loading and checking a spec -----------------------------===//
#include "driver/Spec.h"

#include "runtime/CudaDriver.h"
#include "driver/Report.h"

#include "dsl/MLIRGen.h"
#include "dsl/Parser.h"
#include "passes/PassNotes.h"
#include "runtime/Sha256.h"
#include "runtime/Version.h"
#include "runtime/tune/TuningDb.h"

#include "attnc/abi/TileModel.h"

#include "mlir/Pass/PassManager.h"

#include "llvm/Support/raw_os_ostream.h"
#include "llvm/Support/raw_ostream.h"

#include <filesystem>
#include <fstream>
#include <ostream>
#include <regex>
#include <sstream>

using namespace mlir;

namespace attnc::driver {

namespace {
/// Specs are small; anything bigger than this is not a spec.
constexpr std::uintmax_t kMaxSpecBytes = 64u << 20;
} // namespace

bool readSpecFile(const std::string &path, std::string &out, std::string &err) {
  std::error_code ec;
  auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    err = "cannot open '" + path + "': no such file";
    return false;
  }
  if (std::filesystem::is_directory(status)) {
    err = "'" + path + "' is a directory, expected a .attn spec file";
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    err = "cannot open '" + path + "' for reading";
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  if (out.size() > kMaxSpecBytes) {
    err = "'" + path + "' is " + std::to_string(out.size()) + " bytes; specs are limited to " +
          std::to_string(kMaxSpecBytes) + " bytes";
    return false;
  }
  return true;
}

std::string defaultCudaArch() {
  if (cuda::Driver::available())
    if (Expected<cuda::DeviceInfo> dev = cuda::queryDevice(0))
      return dev->arch();
  return "sm_80";
}

bool checkArch(const std::string &arch, std::string &err) {
  std::smatch m;
  static const std::regex re("sm_([0-9]{2,3})a?");
  if (!std::regex_match(arch, m, re)) {
    err = "invalid --arch '" + arch + "'; expected sm_XX, for example sm_80 or sm_90";
    return false;
  }
  int cc = std::stoi(m[1]);
  if (cc < attnc::tile::kOldestSm) {
    err = "--arch " + arch + ": attnc's CUDA kernels need sm_70 (Volta) or newer";
    return false;
  }
  return true;
}

void reportDiagnosticsOf(MLIRContext &context, bool errorsOnly) {
  context.printOpOnDiagnostic(false);
  // Bound now: passes may emit from the context's worker threads, and the
  // engine calls handlers one at a time.
  Reporter *to = &reporter();
  context.getDiagEngine().registerHandler([to, errorsOnly](Diagnostic &d) {
    if (errorsOnly && d.getSeverity() != DiagnosticSeverity::Error)
      return success(); // handled: dropped
    ScopedReporter scope(*to);
    return reportDiagnostic(d);
  });
}

std::optional<ast::Spec> parseSpec(const std::string &text, const std::string &where) {
  DiagnosticEngine diag(text, diagnostics());
  return parseAndCheck(text, where, diag);
}

void prepareContext(MLIRContext &context, bool errorsOnly) {
  registerAttncDialects(context);
  reportDiagnosticsOf(context, errorsOnly);
}

OwningOpRef<ModuleOp> buildSpecModule(MLIRContext &context, const ast::Spec &spec,
                                      bool errorsOnly) {
  prepareContext(context, errorsOnly);
  return mlirGen(context, spec);
}

OwningOpRef<ModuleOp> specModule(MLIRContext &context, const std::string &text,
                                 const std::string &where, bool errorsOnly) {
  std::optional<ast::Spec> spec = parseSpec(text, where);
  if (!spec)
    return nullptr;
  return buildSpecModule(context, *spec, errorsOnly);
}

OwningOpRef<ModuleOp> loadSpecModule(const std::string &path, const char *cmd, MLIRContext &context,
                                     std::string *textOut, const std::string &given) {
  std::string text = given, err;
  if (given.empty() && !readSpecFile(path, text, err)) {
    commandError(cmd, err);
    return nullptr;
  }
  OwningOpRef<ModuleOp> module = specModule(context, text, path, /*errorsOnly=*/true);
  if (module && textOut)
    *textOut = std::move(text);
  return module;
}

std::string sha256Hex(const std::string &text) { return Sha256::hexHash(text); }

bool resolveAuto(ModuleOp module, const ResolveFor &what) {
  ResolvePipelineOptions options;
  if (what.useTuningDb)
    options.tuningDb = tuningDbPath();
  options.target = what.target, options.arch = what.arch;
  options.report = what.report;
  options.runChoices = what.runChoices;
  // k and LSH rounds are the model's, whatever runs it: always applied.
  options.tuneAccuracy = true;
  PassManager pm(module.getContext());
  populateResolvePipeline(pm, options);
  // attn-apply-tuning's notes go to the caller's Reporter, not stderr.
  llvm::raw_os_ostream notes(diagnostics());
  notes.SetUnbuffered(); // in order with the passes' diagnostics
  ScopedPassNotes scope(notes);
  return succeeded(pm.run(module));
}

std::string tuningDbPath() { return tune::TuningDb::defaultPath(); }

} // namespace attnc::driver
