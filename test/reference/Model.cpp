//===- Model.cpp - The whole-model reference: a hand-assembled step -------===//
#include "test/reference/Model.h"

#include "runtime/PhiloxDraws.h"

#include <cmath>
#include <cstring>

namespace attnc::train {

namespace {

/// [B, S, H·Dh] rows → [B, H, S, Dh].
st::Tensor splitHeads(const float *x, int B, int S, int H, int Dh) {
  std::vector<float> v(size_t(B) * S * H * Dh);
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < S; ++s)
      for (int h = 0; h < H; ++h)
        std::memcpy(&v[((size_t(b) * H + h) * S + s) * Dh],
                    &x[(size_t(b) * S + s) * H * Dh + size_t(h) * Dh], Dh * sizeof(float));
  return st::Tensor::f32({B, H, S, Dh}, v);
}

/// [B, H, S, Dh] → [B, S, H·Dh] rows.
void mergeHeads(const st::Tensor &t, float *x, int B, int S, int H, int Dh) {
  const float *v = reinterpret_cast<const float *>(t.data.data());
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < S; ++s)
      for (int h = 0; h < H; ++h)
        std::memcpy(&x[(size_t(b) * S + s) * H * Dh + size_t(h) * Dh],
                    &v[((size_t(b) * H + h) * S + s) * Dh], Dh * sizeof(float));
}

st::Tensor asTensor(const std::vector<int64_t> &shape, const std::vector<float> &v) {
  return st::Tensor::f32(shape, v);
}

/// The first non-finite element of `v`, or -1.
int64_t firstNonFinite(const std::vector<float> &v) {
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      return int64_t(i);
  return -1;
}

/// An error naming the tensor and the element when `v` holds a NaN or Inf
/// (a diverging run stops where it diverges, not at the loss).
Status checkFinite(const std::vector<float> &v, const std::string &what, int dim) {
  int64_t i = firstNonFinite(v);
  if (i < 0)
    return {};
  return makeError(what + " is " + (std::isnan(v[size_t(i)]) ? "NaN" : "infinite") + " at row " +
                   std::to_string(i / dim) + ", column " + std::to_string(i % dim));
}

void addTensorInto(std::vector<float> &dst, const st::Tensor &t) {
  const float *v = reinterpret_cast<const float *>(t.data.data());
  for (size_t i = 0; i < dst.size(); ++i)
    dst[i] += v[i];
}

} // namespace

Model::Model(ParameterStore &store, AttentionFn attention)
    : cfg_(store.config()), store_(store), attn_(std::move(attention)) {
  tok_ = store.find("tok_emb");
  pos_ = store.find("pos_emb");
  sharedE_ = store.find("lowrank.E");
  for (int l = 0; l < cfg_.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    auto get = [&](const char *name) { return store.find(p + name); };
    LayerParams L;
    L.ln1g = get("ln1.gamma"), L.ln1b = get("ln1.beta");
    L.wq = get("attn.wq"), L.bq = get("attn.bq"), L.wk = get("attn.wk"), L.bk = get("attn.bk");
    L.wv = get("attn.wv"), L.bv = get("attn.bv"), L.wo = get("attn.wo"), L.bo = get("attn.bo");
    L.ln2g = get("ln2.gamma"), L.ln2b = get("ln2.beta");
    L.w1 = get("ffn.w1"), L.b1 = get("ffn.b1"), L.w2 = get("ffn.w2"), L.b2 = get("ffn.b2");
    L.E = get("attn.E"), L.F = get("attn.F"), L.headParams = get("attn.head_params");
    L.rotations = store.constant(p + "attn.lsh_rotations");
    layers_.push_back(L);
  }
  lnfG_ = store.find("final_ln.gamma");
  lnfB_ = store.find("final_ln.beta");
  wout_ = store.find("head.w");
  bout_ = store.find("head.b");
}

Status Model::attention(int l, const float *z, float *a, int B, const float *dA, float *dz) {
  const int S = cfg_.seq, D = cfg_.dModel, H = cfg_.heads, Dh = D / H;
  const int64_t R = int64_t(B) * S;
  LayerParams &L = layers_[l];
  std::vector<float> q(size_t(R) * D), k, v(size_t(R) * D), out(size_t(R) * D);
  linearForward(z, L.wq->value.data(), L.bq->value.data(), q.data(), R, D, D);
  if (!cfg_.sharedQk) {
    k.resize(size_t(R) * D);
    linearForward(z, L.wk->value.data(), L.bk->value.data(), k.data(), R, D, D);
  }
  linearForward(z, L.wv->value.data(), L.bv->value.data(), v.data(), R, D, D);
  st::Tensor tq = splitHeads(q.data(), B, S, H, Dh), tv = splitHeads(v.data(), B, S, H, Dh);
  st::Tensor tk = cfg_.sharedQk ? st::Tensor() : splitHeads(k.data(), B, S, H, Dh);
  st::Tensor lengths = st::Tensor::i32({B}, std::vector<int32_t>(size_t(B), S));
  st::Tensor tE, tF, tP, tdOut;
  AttentionInputs in;
  in.q = &tq, in.k = cfg_.sharedQk ? &tq : &tk, in.v = &tv, in.lengths = &lengths;
  // The kernels' attention dropout (if the variant has one): a pure
  // function of (seed, step, layer, position), so the backward and a
  // reversible rebuild redraw the forward's masks.
  in.dropout = training_;
  in.dropoutSeed = cfg_.dropoutSeed;
  in.dropoutOffset = uint32_t(dropoutStep_) * 4096u + uint32_t(l);
  Param *E = sharedE_ ? sharedE_ : L.E;
  if (E) {
    tE = asTensor(E->shape, E->value);
    in.E = &tE;
    if (L.F) {
      tF = asTensor(L.F->shape, L.F->value);
      in.F = &tF;
    }
  }
  if (L.headParams) {
    tP = asTensor(L.headParams->shape, L.headParams->value);
    in.params = &tP;
  }
  if (cfg_.lshRounds > 0)
    in.rotations = L.rotations;
  std::vector<float> dOut;
  if (dA) {
    dOut.resize(size_t(R) * D);
    // dOut = dA·Woᵀ (the input gradient of out·Wo; Wo's own gradient comes
    // below, once the kernel has produced out).
    linearBackward(dA, nullptr, L.wo->value.data(), dOut.data(), nullptr, nullptr, R, D, D);
    tdOut = splitHeads(dOut.data(), B, S, H, Dh);
    in.dout = &tdOut;
  }
  Expected<AttentionOutputs> r = attn_(in);
  if (!r)
    return makeError("layer " + std::to_string(l) + " attention: " + r.error());
  mergeHeads(r->out, out.data(), B, S, H, Dh);
  linearForward(out.data(), L.wo->value.data(), L.bo->value.data(), a, R, D, D);
  if (!dA)
    return {};
  linearBackward(dA, out.data(), L.wo->value.data(), nullptr, L.wo->grad.data(), L.bo->grad.data(),
                 R, D, D);
  std::vector<float> g(size_t(R) * D);
  mergeHeads(*r->dq, g.data(), B, S, H, Dh);
  linearBackward(g.data(), z, L.wq->value.data(), dz, L.wq->grad.data(), L.bq->grad.data(), R, D,
                 D);
  if (!cfg_.sharedQk) {
    mergeHeads(*r->dk, g.data(), B, S, H, Dh);
    linearBackward(g.data(), z, L.wk->value.data(), dz, L.wk->grad.data(), L.bk->grad.data(), R, D,
                   D, /*accumulateDx=*/true);
  }
  mergeHeads(*r->dv, g.data(), B, S, H, Dh);
  linearBackward(g.data(), z, L.wv->value.data(), dz, L.wv->grad.data(), L.bv->grad.data(), R, D, D,
                 /*accumulateDx=*/true);
  if (E && r->dE)
    addTensorInto(E->grad, *r->dE);
  if (L.F && r->dF)
    addTensorInto(L.F->grad, *r->dF);
  if (L.headParams && r->dparams) {
    const float *dp = reinterpret_cast<const float *>(r->dparams->data.data());
    for (size_t k2 = 0; k2 < cfg_.headParams.size(); ++k2)
      if (cfg_.headParams[k2].learned) // constants stay constant
        for (int h = 0; h < H; ++h)
          L.headParams->grad[k2 * H + h] += dp[k2 * H + h];
  }
  return {};
}

Status Model::standardForward(int l, const float *x, float *y, int B) {
  const int D = cfg_.dModel;
  const int64_t R = int64_t(B) * cfg_.seq;
  LayerParams &L = layers_[l];
  std::vector<float> z(size_t(R) * D), a(size_t(R) * D), mean(R), rstd(R);
  layerNormForward(x, L.ln1g->value.data(), L.ln1b->value.data(), z.data(), mean.data(),
                   rstd.data(), R, D);
  if (Status s = attention(l, z.data(), a.data(), B, nullptr, nullptr); !s)
    return s;
  dropoutMask(l, 0, a.data(), R * D);
  std::vector<float> &h = savedH_[l];
  h.resize(size_t(R) * D);
  for (size_t i = 0; i < h.size(); ++i)
    h[i] = x[i] + a[i];
  savedX_[l].assign(x, x + size_t(R) * D);
  std::memcpy(y, h.data(), h.size() * sizeof(float));
  if (!L.w1) // attention-only layer
    return {};
  layerNormForward(h.data(), L.ln2g->value.data(), L.ln2b->value.data(), z.data(), mean.data(),
                   rstd.data(), R, D);
  addFfn(l, z.data(), y, R);
  return {};
}

void Model::addFfn(int l, const float *z, float *y, int64_t R) {
  const LayerParams &L = layers_[l];
  const int D = cfg_.dModel, chunk = cfg_.ffnChunk > 0 ? cfg_.ffnChunk : int(R);
  if (!dropoutOn_) { // straight into the residual stream
    ffnForward(z, L.w1->value.data(), L.b1->value.data(), L.w2->value.data(), L.b2->value.data(), y,
               R, D, cfg_.dff, chunk, cfg_.act, /*accumulate=*/true);
    return;
  }
  std::vector<float> f(size_t(R) * D);
  ffnForward(z, L.w1->value.data(), L.b1->value.data(), L.w2->value.data(), L.b2->value.data(),
             f.data(), R, D, cfg_.dff, chunk, cfg_.act);
  dropoutMask(l, 1, f.data(), R * D);
  for (size_t i = 0; i < f.size(); ++i)
    y[i] += f[i];
}

const float *Model::maskedCotangent(int layer, int branch, const float *d, int64_t n,
                                    std::vector<float> &buffer) const {
  if (!dropoutOn_)
    return d;
  buffer.assign(d, d + n);
  dropoutMask(layer, branch, buffer.data(), n);
  return buffer.data();
}

void Model::dropoutMask(int layer, int branch, float *v, int64_t n) const {
  if (!dropoutOn_)
    return;
  const float p = cfg_.dropout, keepScale = 1.0f / (1.0f - p);
  const uint32_t stream = 0x10000u + 2u * uint32_t(layer) + uint32_t(branch);
  const uint64_t seed = cfg_.dropoutSeed;
  const uint32_t step = uint32_t(dropoutStep_);
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
  for (int64_t i = 0; i < n; ++i)
    v[i] = philox::dropoutUniform(seed, stream, step, uint64_t(i)) < p ? 0.0f : v[i] * keepScale;
}

Status Model::standardBackward(int l, const float *dy, float *dx, int B) {
  const int D = cfg_.dModel;
  const int64_t R = int64_t(B) * cfg_.seq;
  const int chunk = cfg_.ffnChunk > 0 ? cfg_.ffnChunk : int(R);
  LayerParams &L = layers_[l];
  const std::vector<float> &x = savedX_[l], &h = savedH_[l];
  std::vector<float> z(size_t(R) * D), dz(size_t(R) * D), dh(dy, dy + size_t(R) * D), mean(R),
      rstd(R), a(size_t(R) * D), dln(size_t(R) * D);
  // y = h + FFN(LN2(h)) (y = h for an attention-only layer)
  // Dropout masks replayed: the branch's cotangent is the masked one.
  std::vector<float> masked;
  if (L.w1) {
    layerNormForward(h.data(), L.ln2g->value.data(), L.ln2b->value.data(), z.data(), mean.data(),
                     rstd.data(), R, D);
    ffnBackward(maskedCotangent(l, 1, dy, R * D, masked), z.data(), L.w1->value.data(),
                L.b1->value.data(), L.w2->value.data(), dz.data(), L.w1->grad.data(),
                L.b1->grad.data(), L.w2->grad.data(), L.b2->grad.data(), R, D, cfg_.dff, chunk,
                cfg_.act);
    layerNormBackward(dz.data(), h.data(), L.ln2g->value.data(), mean.data(), rstd.data(),
                      dln.data(), L.ln2g->grad.data(), L.ln2b->grad.data(), R, D);
    for (size_t i = 0; i < dh.size(); ++i)
      dh[i] += dln[i];
  }
  // h = x + Attn(LN1(x))
  layerNormForward(x.data(), L.ln1g->value.data(), L.ln1b->value.data(), z.data(), mean.data(),
                   rstd.data(), R, D);
  if (Status s = attention(l, z.data(), a.data(), B,
                           maskedCotangent(l, 0, dh.data(), R * D, masked), dz.data());
      !s)
    return s;
  layerNormBackward(dz.data(), x.data(), L.ln1g->value.data(), mean.data(), rstd.data(), dln.data(),
                    L.ln1g->grad.data(), L.ln1b->grad.data(), R, D);
  for (size_t i = 0; i < dh.size(); ++i)
    dx[i] = dh[i] + dln[i];
  return {};
}

Status Model::reversibleForward(int l, float *x1, float *x2, int B) {
  const int D = cfg_.dModel;
  const int64_t R = int64_t(B) * cfg_.seq;
  LayerParams &L = layers_[l];
  std::vector<float> z(size_t(R) * D), a(size_t(R) * D), mean(R), rstd(R);
  // y1 = x1 + Attn(LN(x2))
  layerNormForward(x2, L.ln1g->value.data(), L.ln1b->value.data(), z.data(), mean.data(),
                   rstd.data(), R, D);
  if (Status s = attention(l, z.data(), a.data(), B, nullptr, nullptr); !s)
    return s;
  dropoutMask(l, 0, a.data(), R * D);
  for (size_t i = 0; i < a.size(); ++i)
    x1[i] += a[i];
  // y2 = x2 + FFN(LN(y1))
  layerNormForward(x1, L.ln2g->value.data(), L.ln2b->value.data(), z.data(), mean.data(),
                   rstd.data(), R, D);
  addFfn(l, z.data(), x2, R);
  return {};
}

Status Model::reversibleBackward(int l, float *y1, float *y2, float *dy1, float *dy2, int B) {
  const int D = cfg_.dModel;
  const int64_t R = int64_t(B) * cfg_.seq;
  const int chunk = cfg_.ffnChunk > 0 ? cfg_.ffnChunk : int(R);
  LayerParams &L = layers_[l];
  std::vector<float> z(size_t(R) * D), dz(size_t(R) * D), f(size_t(R) * D), dln(size_t(R) * D),
      mean(R), rstd(R);
  // Undo y2 = x2 + FFN(LN(y1)): x2 = y2 − FFN(LN(y1)); dy1 += ∂/∂y1.
  layerNormForward(y1, L.ln2g->value.data(), L.ln2b->value.data(), z.data(), mean.data(),
                   rstd.data(), R, D);
  ffnForward(z.data(), L.w1->value.data(), L.b1->value.data(), L.w2->value.data(),
             L.b2->value.data(), f.data(), R, D, cfg_.dff, chunk, cfg_.act);
  dropoutMask(l, 1, f.data(), R * D); // the forward's mask, replayed
  for (size_t i = 0; i < f.size(); ++i)
    y2[i] -= f[i]; // now x2
  if (cfg_.storeReversibleInputs)
    std::memcpy(y2, savedH_[l].data(), f.size() * sizeof(float));
  std::vector<float> masked;
  ffnBackward(maskedCotangent(l, 1, dy2, R * D, masked), z.data(), L.w1->value.data(),
              L.b1->value.data(), L.w2->value.data(), dz.data(), L.w1->grad.data(),
              L.b1->grad.data(), L.w2->grad.data(), L.b2->grad.data(), R, D, cfg_.dff, chunk,
              cfg_.act);
  layerNormBackward(dz.data(), y1, L.ln2g->value.data(), mean.data(), rstd.data(), dln.data(),
                    L.ln2g->grad.data(), L.ln2b->grad.data(), R, D);
  for (size_t i = 0; i < dln.size(); ++i)
    dy1[i] += dln[i];
  // Undo y1 = x1 + Attn(LN(x2)): x1 = y1 − Attn(LN(x2)); dx2 = dy2 + ∂/∂x2.
  layerNormForward(y2, L.ln1g->value.data(), L.ln1b->value.data(), z.data(), mean.data(),
                   rstd.data(), R, D);
  if (Status s =
          attention(l, z.data(), f.data(), B, maskedCotangent(l, 0, dy1, R * D, masked), dz.data());
      !s)
    return s;
  dropoutMask(l, 0, f.data(), R * D);
  for (size_t i = 0; i < f.size(); ++i)
    y1[i] -= f[i]; // now x1
  if (cfg_.storeReversibleInputs)
    std::memcpy(y1, savedX_[l].data(), f.size() * sizeof(float));
  layerNormBackward(dz.data(), y2, L.ln1g->value.data(), mean.data(), rstd.data(), dln.data(),
                    L.ln1g->grad.data(), L.ln1b->grad.data(), R, D);
  for (size_t i = 0; i < dln.size(); ++i)
    dy2[i] += dln[i];
  return {};
}

Expected<StepResult> Model::run(const Batch &batch, bool backward) {
  const int B = batch.B, S = cfg_.seq, D = cfg_.dModel, V = cfg_.vocab;
  if (batch.S != S || batch.inputs.size() != size_t(B) * S || batch.targets.size() != size_t(B) * S)
    return makeError("batch of [" + std::to_string(B) + ", " + std::to_string(batch.S) +
                     "] does not match the model's sequence length " + std::to_string(S));
  const int rowsTok = int(tok_->shape[0]);
  for (int32_t t : batch.inputs)
    if (t < 0 || t >= rowsTok)
      return makeError("token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                       std::to_string(rowsTok) + ")");
  const int64_t R = int64_t(B) * S;
  const int width = cfg_.reversible ? 2 * D : D;
  std::vector<float> x(size_t(R) * D);
  embeddingForward(batch.inputs.data(), tok_->value.data(), pos_->value.data(), x.data(), R, S, D);
  savedX_.assign(cfg_.layers, {});
  savedH_.assign(cfg_.layers, {});
  std::vector<float> top(size_t(R) * width); // the final layer norm's input
  std::vector<float> x2;
  if (cfg_.reversible) {
    x2 = x;
    for (int l = 0; l < cfg_.layers; ++l) {
      if (cfg_.storeReversibleInputs)
        savedX_[l] = x, savedH_[l] = x2;
      if (Status s = reversibleForward(l, x.data(), x2.data(), B); !s)
        return s.takeError();
      std::string at = "the output of layer " + std::to_string(l);
      if (Status s = checkFinite(x, at + " (y1)", D); !s)
        return s.takeError();
      if (Status s = checkFinite(x2, at + " (y2)", D); !s)
        return s.takeError();
    }
    for (int64_t r = 0; r < R; ++r) {
      std::memcpy(&top[size_t(r) * width], &x[size_t(r) * D], D * sizeof(float));
      std::memcpy(&top[size_t(r) * width + D], &x2[size_t(r) * D], D * sizeof(float));
    }
  } else {
    std::vector<float> y(size_t(R) * D);
    for (int l = 0; l < cfg_.layers; ++l) {
      if (Status s = standardForward(l, x.data(), y.data(), B); !s)
        return s.takeError();
      if (Status s = checkFinite(y, "the output of layer " + std::to_string(l), D); !s)
        return s.takeError();
      std::swap(x, y);
    }
    top = x;
  }
  std::vector<float> zf(size_t(R) * width), mean(R), rstd(R);
  layerNormForward(top.data(), lnfG_->value.data(), lnfB_->value.data(), zf.data(), mean.data(),
                   rstd.data(), R, width);
  logits_.resize(size_t(R) * V);
  linearForward(zf.data(), wout_->value.data(), bout_->value.data(), logits_.data(), R, width, V);
  if (Status s = checkFinite(logits_, "the logits", V); !s)
    return s.takeError();
  StepResult res;
  // Count first: the gradient is of the mean loss over counted positions.
  int64_t counted = 0;
  for (int32_t t : batch.targets) {
    if (t >= V)
      return makeError("target id " + std::to_string(t) + " is outside the vocabulary [0, " +
                       std::to_string(V) + ")");
    counted += t >= 0;
  }
  std::vector<float> dlogits(backward ? size_t(R) * V : 0);
  res.ce =
      softmaxCrossEntropy(logits_.data(), batch.targets.data(), backward ? dlogits.data() : nullptr,
                          R, V, counted ? 1.0f / float(counted) : 0.0f);
  if (!backward) {
    savedX_.clear(); // eval and generate keep nothing
    savedH_.clear();
    return res;
  }

  std::vector<float> dzf(size_t(R) * width), dtop(size_t(R) * width);
  linearBackward(dlogits.data(), zf.data(), wout_->value.data(), dzf.data(), wout_->grad.data(),
                 bout_->grad.data(), R, width, V);
  layerNormBackward(dzf.data(), top.data(), lnfG_->value.data(), mean.data(), rstd.data(),
                    dtop.data(), lnfG_->grad.data(), lnfB_->grad.data(), R, width);
  std::vector<float> dx(size_t(R) * D);
  if (cfg_.reversible) {
    std::vector<float> dx2(size_t(R) * D);
    for (int64_t r = 0; r < R; ++r) {
      std::memcpy(&dx[size_t(r) * D], &dtop[size_t(r) * width], D * sizeof(float));
      std::memcpy(&dx2[size_t(r) * D], &dtop[size_t(r) * width + D], D * sizeof(float));
    }
    for (int l = cfg_.layers - 1; l >= 0; --l)
      if (Status s = reversibleBackward(l, x.data(), x2.data(), dx.data(), dx2.data(), B); !s)
        return s.takeError();
    for (size_t i = 0; i < dx.size(); ++i) // x1 = x2 = embedding
      dx[i] += dx2[i];
  } else {
    dx = dtop;
    std::vector<float> dprev(size_t(R) * D);
    for (int l = cfg_.layers - 1; l >= 0; --l) {
      if (Status s = standardBackward(l, dx.data(), dprev.data(), B); !s)
        return s.takeError();
      std::swap(dx, dprev);
    }
  }
  if (Status s = checkFinite(dx, "the gradient reaching the embeddings", D); !s)
    return s.takeError();
  embeddingBackward(batch.inputs.data(), dx.data(), tok_->grad.data(), pos_->grad.data(), R, S, D,
                    rowsTok);
  savedX_.clear();
  savedH_.clear();
  return res;
}

Model::ActivationPlan Model::activationPlanOf(const ModelConfig &cfg_, int batch) {
  const int64_t R = int64_t(batch) * cfg_.seq, D = cfg_.dModel, V = cfg_.vocab, F = cfg_.dff;
  const int64_t width = cfg_.reversible ? 2 * D : D;
  const int64_t chunk = cfg_.ffnChunk > 0 ? std::min<int64_t>(cfg_.ffnChunk, R) : R;
  ActivationPlan p;
  // Kept from the forward to the backward: standard layers their input and
  // midpoint; reversible layers nothing (the last outputs are the top).
  p.keptBytes = 4 * (R * width /*top*/ + R * width /*zf*/ + R * V /*logits*/);
  if (!cfg_.reversible || cfg_.storeReversibleInputs)
    p.keptBytes += 4 * int64_t(cfg_.layers) * 2 * R * D;
  // One layer's recomputation: q, k, v, attention in/out (as tensors and
  // rows), gradients of the same, LN scratch, the FFN chunk intermediate.
  p.scratchBytes = 4 * (12 * R * D + 2 * chunk * F + 4 * R);
  if (cfg_.dropout > 0) // the FFN output before its mask, a masked cotangent
    p.scratchBytes += 4 * 2 * R * D;
  return p;
}

Model::InferencePlan Model::inferencePlan(int batch, int64_t attentionWorkspaceBytes) const {
  // Counted in floats (4 bytes; the int32 buffers are 4 bytes too), phase by
  // phase in the order run(batch, false) allocates and frees.
  const int64_t B = batch, S = cfg_.seq, D = cfg_.dModel, H = cfg_.heads, Dh = D / H;
  const int64_t V = cfg_.vocab, F = cfg_.dff, R = B * S, RD = R * D;
  const int64_t W = cfg_.reversible ? 2 * D : D;
  const int64_t chunk = cfg_.ffnChunk > 0 ? std::min<int64_t>(cfg_.ffnChunk, R) : R;
  // Layers.cpp's packB: panels of 16 columns, zero-padded, + 8 floats.
  auto packed = [](int64_t K, int64_t N) { return (N + 15) / 16 * K * 16 + 8; };
  InferencePlan p;
  int64_t rotations = 0;
  for (const LayerParams &L : layers_)
    rotations += L.rotations ? L.rotations->numel() : 0;
  p.weightBytes = 4 * (2 * store_.numParams() + rotations); // value and grad of every parameter
  p.inputBytes = 4 * 2 * R;                                 // Batch::inputs, targets
  // Live for the whole run: x, top, y (standard) or x2 (reversible), and the
  // logits kept from the previous call.
  const int64_t run = RD + R * W + RD + R * V;
  const int64_t layer = 2 * RD + 2 * R; // z, a, mean, rstd
  // attention(): the q, k, v, out rows, their [B, H, S, Dh] copies, the
  // lengths, copies of E, F and the head parameters, then the kernel's out
  // and lse and (low-rank) the projected K', V' of CpuAttention::run.
  const int64_t rows = (cfg_.sharedQk ? 3 : 4) * RD, split = (cfg_.sharedQk ? 2 : 3) * RD;
  int64_t copies = B + (cfg_.headParams.empty() ? 0 : int64_t(cfg_.headParams.size()) * H);
  if (!layers_.empty()) {
    const LayerParams &L0 = layers_.front();
    const Param *E = sharedE_ ? sharedE_ : L0.E;
    copies += (E ? int64_t(E->value.size()) : 0) + (L0.F ? int64_t(L0.F->value.size()) : 0);
  }
  const int64_t outputs = RD + B * H * S;
  const int64_t projected = cfg_.lowrank ? 2 * B * H * cfg_.lowrankK * Dh : 0;
  const int64_t workspace = (attentionWorkspaceBytes + 3) / 4;
  const bool keepsInputs = !cfg_.reversible || cfg_.storeReversibleInputs;
  auto consider = [&](int64_t floats, const std::string &where) {
    if (4 * floats > p.activationBytes)
      p.activationBytes = 4 * floats, p.peakAt = where;
  };
  for (int l = 0; l < cfg_.layers; ++l) {
    // Standard layers keep (x, h) of the layers before; a reversible layer
    // with storeReversibleInputs has stored its own pair already.
    int64_t saved = keepsInputs ? 2 * RD * (cfg_.reversible ? l + 1 : l) : 0;
    int64_t base = run + saved + layer;
    std::string at = "layer " + std::to_string(l) + " ";
    consider(base + rows + packed(D, D), at + "q/k/v projection");
    consider(base + rows + split + copies + outputs + projected + workspace, at + "attention");
    consider(base + rows + split + copies + outputs + packed(D, D), at + "output projection");
    if (layers_[size_t(l)].w1) {
      if (!cfg_.reversible)
        saved += 2 * RD; // this layer's x and h are saved before its FFN
      consider(run + saved + layer + packed(D, F) + packed(F, D) + chunk * F, at + "ffn");
    }
  }
  // The head: x, top (and x2), every saved pair, zf, mean, rstd, the
  // logits, the packed head weights, the cross-entropy's per-row loss
  // (double) and hit (byte).
  int64_t saved = keepsInputs ? 2 * RD * cfg_.layers : 0;
  consider(RD + R * W + (cfg_.reversible ? RD : 0) + saved + R * W + 2 * R + R * V + packed(W, V) +
               (9 * R + 3) / 4,
           "head");
  return p;
}

} // namespace attnc::train
