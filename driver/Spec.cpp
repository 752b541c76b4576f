//===- Spec.cpp - Loading and checking a spec -----------------------------===//
#include "driver/Spec.h"

#include "dsl/MLIRGen.h"
#include "dsl/Parser.h"
#include "runtime/Sha256.h"
#include "runtime/Version.h"
#include "runtime/tune/TuningDb.h"

#include "attnc/abi/TileModel.h"

#include "mlir/Pass/PassManager.h"

#include "llvm/Support/raw_ostream.h"

#include <filesystem>
#include <fstream>
#include <iostream>
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

LogicalResult printDiagnostic(Diagnostic &d) {
  const char *kind = d.getSeverity() == DiagnosticSeverity::Error     ? "error"
                     : d.getSeverity() == DiagnosticSeverity::Warning ? "warning"
                     : d.getSeverity() == DiagnosticSeverity::Remark  ? "remark"
                                                                      : "note";
  std::string loc;
  llvm::raw_string_ostream ls(loc);
  d.getLocation().print(ls);
  if (auto flc = llvm::dyn_cast<FileLineColLoc>(d.getLocation()))
    loc = (flc.getFilename().str() + ":" + std::to_string(flc.getLine()) + ":" +
           std::to_string(flc.getColumn()));
  std::cerr << loc << ": " << kind << ": " << d.str() << "\n";
  return success();
}

OwningOpRef<ModuleOp> loadSpecModule(const std::string &path, const char *cmd, MLIRContext &context,
                                     std::string *textOut) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::cerr << "attnc " << cmd << ": error: cannot open '" << path << "'\n";
    return nullptr;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  DiagnosticEngine diag(text, std::cerr);
  std::optional<ast::Spec> spec = parseAndCheck(text, path, diag);
  if (!spec)
    return nullptr;
  registerAttncDialects(context);
  OwningOpRef<ModuleOp> module = mlirGen(context, *spec);
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
  // k and LSH rounds are the model's, whatever runs it: always applied.
  options.tuneAccuracy = true;
  PassManager pm(module.getContext());
  populateResolvePipeline(pm, options);
  return succeeded(pm.run(module));
}

std::string tuningDbPath() { return tune::TuningDb::defaultPath(); }

int commandError(const char *cmd, const std::string &msg) {
  std::cerr << "attnc " << cmd << ": error: " << msg << "\n";
  return kExitInput;
}

} // namespace attnc::driver
