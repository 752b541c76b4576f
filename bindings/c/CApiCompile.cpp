//===- CApiCompile.cpp - attnc_compile: a spec's variant through the compiler ===//
//
// The one C ABI call that needs MLIR: the spec's front end, the resolve
// and kernel pipelines and the emitters (the driver), then the host
// compiler or NVRTC. Each compile installs its own driver reporter
// (driver/Report.h) on its thread and returns what the driver said as the
// error's message; compiles on different threads run concurrently. A
// runtime-only build links
// CApiNoCompiler.cpp instead.
//
//===----------------------------------------------------------------------===//
#include "CApiInternal.h"

#include "codegen/AttentionFunction.h"
#include "driver/Report.h"
#include "driver/Run.h"
#include "driver/Spec.h"
#include "dsl/AttnDialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"

#include <algorithm>
#include <sstream>

using namespace attnc;
using namespace attnc::capi;

namespace {

/// The driver's words during one compile on this thread, kept to become
/// the error's message (each call its own: compiles run concurrently).
class KeptWords {
public:
  KeptWords() : reporter_(text_, text_), scope_(reporter_) {}
  std::string text() const {
    std::string t = text_.str();
    while (!t.empty() && (t.back() == '\n' || t.back() == ' '))
      t.pop_back();
    return t;
  }

private:
  std::ostringstream text_;
  driver::Reporter reporter_;
  driver::ScopedReporter scope_;
};

/// The spec's text: `spec` itself, or the file it names.
bool specText(const char *spec, std::string &text, std::string &where, std::string &err) {
  const std::string s = spec;
  const bool looksLikePath = s.find('\n') == std::string::npos && s.find('{') == std::string::npos;
  if (looksLikePath) {
    where = s;
    return driver::readSpecFile(s, text, err);
  }
  where = "<spec>";
  text = s;
  return true;
}

} // namespace

extern "C" attnc_error *attnc_compile(const char *spec, const char *name,
                                      const attnc_compile_options *o, attnc_variant **variant) {
  return guard([&]() -> attnc_error * {
    if (!variant)
      return fail("attnc_compile: variant is NULL");
    *variant = nullptr;
    if (!spec)
      return fail("attnc_compile: spec is NULL");
    Target target;
    if (attnc_error *e = checkOptions(o, "attnc_compile", target))
      return e;

    std::string text, where, err;
    if (!specText(spec, text, where, err))
      return fail(err);
    KeptWords said;
    auto failed = [&](const std::string &what) {
      std::string words = said.text();
      return fail(words.empty() ? what : what + ":\n" + words);
    };
    mlir::MLIRContext context;
    mlir::OwningOpRef<mlir::ModuleOp> module = driver::specModule(context, text, where);
    if (!module)
      return failed("the spec " + (where == "<spec>" ? std::string("text") : where) +
                    " has errors");
    // The choices attnc train and attnc compile make for this target.
    driver::ResolveFor resolve;
    if (target.cuda)
      resolve.target = "cuda", resolve.arch = target.arch;
    if (!driver::resolveAuto(*module, resolve))
      return failed("resolving the spec's 'auto' choices failed");

    std::vector<attn::VariantOp> variants(module->getOps<attn::VariantOp>().begin(),
                                          module->getOps<attn::VariantOp>().end());
    attn::VariantOp chosen;
    std::string names;
    const std::string want = name ? name : "";
    for (attn::VariantOp v : variants) {
      names += (names.empty() ? "" : ", ") + v.getSymName().str();
      if (v.getSymName() == want || (want.empty() && variants.size() == 1))
        chosen = v;
    }
    if (!chosen)
      return fail(variants.empty() ? std::string("the spec has no attention variant")
                  : want.empty()
                      ? "the spec has " + std::to_string(variants.size()) +
                            " attention variants (" + names + "); name one"
                      : "no attention variant '" + want + "' (the spec has: " + names + ")");

    auto v = std::make_unique<attnc_variant>();
    v->name = chosen.getSymName().str();
    v->heads = o->heads, v->headDim = o->head_dim;
    v->keyPadding = o->key_padding != 0 || chosen.getKeyPadding();
    AttentionSignature &sig = v->sig;
    sig.name = v->name;
    sig.keyPadding = chosen.getKeyPadding();
    sig.sharedQk = chosen.getSharedQk();
    if (auto lsh = chosen.getLshAttr()) {
      sig.lshRounds = lsh.getRounds();
      sig.lshBuckets = lsh.getBuckets();
      sig.lshSeed = uint64_t(lsh.getSeed());
    }
    if (auto lr = chosen.getLowrankAttr()) {
      sig.lowrank = true;
      sig.share = stringifyShareMode(lr.getShare()).str();
      sig.k = lr.getK();
      v->maxSeq = o->max_seq;
    }
    if (auto decls = chosen.getParams())
      for (mlir::Attribute a : *decls) {
        auto hp = llvm::cast<attn::HeadParamAttr>(a);
        sig.params.push_back({hp.getName().str(), hp.getInit() == attn::ParamInit::alibi,
                              float(hp.getValue().convertToDouble()), hp.getLearned()});
      }
    if (attnc_error *e = describeParams(*v))
      return e;

    codegen::AttentionShape shape;
    shape.heads = o->heads, shape.headDim = o->head_dim;
    shape.maxSeq = sig.lowrank ? o->max_seq : 0;
    shape.elementType = o->dtype == ATTNC_F16    ? mlir::Type(mlir::Float16Type::get(&context))
                        : o->dtype == ATTNC_BF16 ? mlir::Type(mlir::BFloat16Type::get(&context))
                                                 : mlir::Type(mlir::Float32Type::get(&context));
    shape.withLengths = v->keyPadding;
    shape.differentiate = o->backward != 0;
    if (auto lsh = chosen.getLshAttr()) {
      // The LSH kernels take N when called; N decides only the dense
      // fallback (taken when every chunk is in every query's window, which
      // the ABI cannot promise for the Ns to come). So the ABI compiles the
      // LSH kernels themselves, at an N past that bound.
      shape.seq = lsh.getChunk() * (std::min(lsh.getBefore(), lsh.getAfter()) + 2);
    }
    if (target.cuda) {
      auto state = std::make_unique<CudaState>();
      state->emulated = target.emulated, state->ordinal = target.ordinal, state->dtype = o->dtype;
      if (driver::compileCudaAttention(*module, chosen, shape, target.arch, state->emulated,
                                       state->kernels, state->ordinal) != driver::kExitOk)
        return failed("compiling '" + v->name + "' for " + target.name + " (" + target.arch +
                      ") failed");
      v->cuda = std::move(state);
      if (attnc_error *e = prepareCuda(*v, *v->cuda))
        return e;
      *variant = v.release();
      return nullptr;
    }
    std::optional<CpuAttention> kernels;
    if (driver::compileCpuAttention(*module, chosen, shape, kernels) != driver::kExitOk)
      return failed("compiling '" + v->name + "' for the CPU failed");
    v->cpu = std::move(kernels);
    *variant = v.release();
    return nullptr;
  });
}
