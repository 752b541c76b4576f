//===- Session.cpp - The driver's facade: one spec, errors as values ------===//
#include "driver/Session.h"
#include "driver/Run.h"

#include <functional>

namespace attnc::driver {

Session::Session() : reporter_(words_, words_), context_(std::make_unique<mlir::MLIRContext>()) {}

ScopedReporter Session::beginCall() {
  words_.str("");
  words_.clear();
  return ScopedReporter(reporter_);
}

std::string Session::lastWords() const {
  std::string t = words_.str();
  while (!t.empty() && (t.back() == '\n' || t.back() == ' '))
    t.pop_back();
  return t;
}

Error Session::failure(const std::string &what) const {
  const std::string words = lastWords();
  return makeError(words.empty() ? what : what + ":\n" + words);
}

Expected<std::unique_ptr<Session>> Session::fromFile(const std::string &path) {
  std::string text, err;
  if (!readSpecFile(path, text, err))
    return makeError(err);
  return fromText(text, path);
}

Expected<std::unique_ptr<Session>> Session::fromText(const std::string &text,
                                                     const std::string &where) {
  std::unique_ptr<Session> s(new Session());
  ScopedReporter call = s->beginCall();
  // The context's diagnostics go to this session's words from now on.
  s->module_ = specModule(*s->context_, text, where);
  if (!s->module_)
    return s->failure("the spec " + (where == "<spec>" ? std::string("text") : where) +
                      " has errors");
  s->specHash_ = sha256Hex(text);
  s->text_ = text, s->where_ = where;
  return s;
}

Status Session::resolve(const ResolveFor &what) {
  ScopedReporter call = beginCall();
  if (!resolveAuto(module(), what))
    return failure("resolving the spec's 'auto' choices failed");
  return {};
}

Expected<attn::VariantOp> Session::variant(const std::string &name) {
  ScopedReporter call = beginCall();
  std::vector<attn::VariantOp> variants(module().getOps<attn::VariantOp>().begin(),
                                        module().getOps<attn::VariantOp>().end());
  std::string names;
  attn::VariantOp chosen;
  for (attn::VariantOp v : variants) {
    names += (names.empty() ? "" : ", ") + v.getSymName().str();
    if (v.getSymName() == name || (name.empty() && variants.size() == 1))
      chosen = v;
  }
  if (chosen)
    return chosen;
  if (variants.empty())
    return makeError("the spec has no attention variant");
  if (name.empty())
    return makeError("the spec has " + std::to_string(variants.size()) + " attention variants (" +
                     names + "); name one");
  return makeError("no attention variant '" + name + "' (the spec has: " + names + ")");
}

Expected<CpuAttention> Session::compileCpu(attn::VariantOp variant,
                                           const codegen::AttentionShape &shape) {
  ScopedReporter call = beginCall();
  std::optional<CpuAttention> kernels;
  if (mlir::failed(compileCpuAttention(module(), variant, shape, kernels)) || !kernels)
    return failure("compiling '" + variant.getSymName().str() + "' for the CPU failed");
  return std::move(*kernels);
}

Expected<CudaAttention> Session::compileCuda(attn::VariantOp variant,
                                             const codegen::AttentionShape &shape,
                                             const std::string &arch, bool emulate, int ordinal) {
  ScopedReporter call = beginCall();
  std::optional<CudaAttention> kernels;
  if (mlir::failed(
          compileCudaAttention(module(), variant, shape, arch, emulate, kernels, ordinal)) ||
      !kernels)
    return failure("compiling '" + variant.getSymName().str() + "' for " +
                   (emulate ? "cuda-sim" : "cuda") + " (" + arch + ") failed");
  return std::move(*kernels);
}

Expected<Artifact> Session::artifact(const ArtifactOptions &options) {
  ScopedReporter call = beginCall();
  Artifact out;
  if (mlir::failed(buildArtifact(module(), specHash_, options, out)))
    return failure("building the artifact failed");
  return out;
}

Expected<Outcome> Session::outcomeOf(const std::function<CommandResult()> &run, const char *what) {
  ScopedReporter call = beginCall();
  CommandResult r = run();
  if (mlir::failed(r))
    return failure(what);
  return *r;
}

Status Session::statusOf(const std::function<mlir::LogicalResult()> &run, const char *what) {
  Expected<Outcome> r = outcomeOf(
      [&]() -> CommandResult {
        if (mlir::failed(run()))
          return mlir::failure();
        return Outcome::Done;
      },
      what);
  if (!r)
    return r.takeError();
  return {};
}

TrainCliOptions Session::onThisSpec(TrainCliOptions options) const {
  options.spec = where_, options.specText = text_;
  return options;
}

Expected<Outcome> Session::train(TrainCliOptions options) {
  return outcomeOf([&] { return runTrain(onThisSpec(options)); }, "training failed");
}

Status Session::evaluate(TrainCliOptions options) {
  return statusOf([&] { return runEval(onThisSpec(options)); }, "evaluation failed");
}

Status Session::generate(TrainCliOptions options) {
  return statusOf([&] { return runGenerate(onThisSpec(options)); }, "generation failed");
}

Status Session::fill(TrainCliOptions options) {
  return statusOf([&] { return runFill(onThisSpec(options)); }, "filling failed");
}

Expected<Outcome> Session::tune(TuneOptions options) {
  options.spec = where_, options.specText = text_;
  return outcomeOf([&] { return runTune(options); }, "tuning failed");
}

} // namespace attnc::driver
