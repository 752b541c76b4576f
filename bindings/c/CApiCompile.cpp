//===- CApiCompile.cpp - attnc_compile: a spec's variant through the compiler ===//
//
// The one C ABI call that needs MLIR: the spec's front end, the resolve
// and kernel pipelines and the emitters (the driver), then the host
// compiler or NVRTC, through the driver's facade (driver/Session.h): each
// compile is a session of its own, whose errors carry what the compiler
// said, so compiles on different threads run concurrently. A runtime-only
// build links
// CApiNoCompiler.cpp instead.
//
//===----------------------------------------------------------------------===//
#include "CApiInternal.h"

#include "codegen/AttentionFunction.h"
#include "driver/Session.h"
#include "dialect/AttnDialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"

#include <algorithm>

using namespace attnc;
using namespace attnc::capi;

namespace {

/// `spec` is a path when it is one line without a brace.
bool looksLikePath(const std::string &spec) {
  return spec.find('\n') == std::string::npos && spec.find('{') == std::string::npos;
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

    // One session per call: its own context and its own words, so compiles
    // on different threads run at once (driver/Session.h).
    Expected<std::unique_ptr<driver::Session>> session =
        looksLikePath(spec) ? driver::Session::fromFile(spec) : driver::Session::fromText(spec);
    if (!session)
      return fail(session.error());
    driver::Session &s = **session;
    // The choices attnc train and attnc compile make for this target.
    driver::ResolveFor resolve;
    if (target.cuda)
      resolve.target = "cuda", resolve.arch = target.arch;
    if (Status resolved = s.resolve(resolve); !resolved)
      return fail(resolved.error());
    Expected<attn::VariantOp> found = s.variant(name ? name : "");
    if (!found)
      return fail(found.error());
    attn::VariantOp chosen = *found;

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
    mlir::MLIRContext *context = &s.context();
    shape.elementType = o->dtype == ATTNC_F16    ? mlir::Type(mlir::Float16Type::get(context))
                        : o->dtype == ATTNC_BF16 ? mlir::Type(mlir::BFloat16Type::get(context))
                                                 : mlir::Type(mlir::Float32Type::get(context));
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
      Expected<CudaAttention> kernels =
          s.compileCuda(chosen, shape, target.arch, state->emulated, state->ordinal);
      if (!kernels)
        return fail(kernels.error());
      state->kernels = std::move(*kernels);
      v->cuda = std::move(state);
      if (attnc_error *e = prepareCuda(*v, *v->cuda))
        return e;
      *variant = v.release();
      return nullptr;
    }
    Expected<CpuAttention> kernels = s.compileCpu(chosen, shape);
    if (!kernels)
      return fail(kernels.error());
    v->cpu = std::move(*kernels);
    *variant = v.release();
    return nullptr;
  });
}
