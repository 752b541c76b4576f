//===- CApiTest.cpp - attnc's C ABI against a double reference ------------===//
//
// Only the public header (bindings/c/include/attnc/attnc.h) and
// libattnc.so: a causal variant compiled from its text at a shape that is
// no tile multiple (N = 77), its forward and backward against attention
// computed in double precision here, on caller-owned buffers; strided
// inputs refused or copied; a per-head parameter's gradient; and the
// errors a caller can make, each a message naming the place.
//
//===----------------------------------------------------------------------===//
#include "attnc/attnc.h"
#include "test/unit/support/CApiTensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

struct Error {
  attnc_error *e = nullptr;
  ~Error() { attnc_error_free(e); }
  std::string message() const { return e ? attnc_error_message(e) : ""; }
};

attnc_tensor tensor(std::vector<float> &data, std::vector<int64_t> shape) {
  return attnc::test::contiguousTensor(data.data(), ATTNC_F32, ATTNC_CPU, shape);
}

using attnc::test::randn;

/// Causal softmax attention in double: out, and (with dout) dq, dk, dv.
/// `bias[h]` is added to every score as slope · (key − query) when given.
struct Reference {
  std::vector<double> out, dq, dk, dv, dslope;
};
Reference reference(const std::vector<float> &q, const std::vector<float> &k,
                    const std::vector<float> &v, const std::vector<float> &dout, int B, int H,
                    int N, int D, const std::vector<float> &slope) {
  Reference r;
  const size_t all = size_t(B) * H * N * D;
  r.out.assign(all, 0), r.dq.assign(all, 0), r.dk.assign(all, 0), r.dv.assign(all, 0);
  r.dslope.assign(size_t(H), 0);
  const double scale = 1.0 / std::sqrt(double(D));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const size_t base = (size_t(b) * H + h) * N * D;
      auto at = [&](const auto &x, int n, int d) { return double(x[base + size_t(n) * D + d]); };
      for (int i = 0; i < N; ++i) {
        std::vector<double> p(size_t(i) + 1);
        double m = -1e300;
        for (int j = 0; j <= i; ++j) {
          double s = 0;
          for (int d = 0; d < D; ++d)
            s += at(q, i, d) * at(k, j, d);
          s = s * scale + (slope.empty() ? 0.0 : double(slope[size_t(h)]) * (j - i));
          p[size_t(j)] = s, m = std::max(m, s);
        }
        double z = 0;
        for (double &x : p)
          z += (x = std::exp(x - m));
        for (double &x : p)
          x /= z;
        for (int d = 0; d < D; ++d)
          for (int j = 0; j <= i; ++j)
            r.out[base + size_t(i) * D + d] += p[size_t(j)] * at(v, j, d);
        if (dout.empty())
          continue;
        // dP = dO·Vᵀ, dS = P ∘ (dP − rowsum(dO ∘ O)).
        double delta = 0;
        for (int d = 0; d < D; ++d)
          delta += at(dout, i, d) * r.out[base + size_t(i) * D + d];
        for (int j = 0; j <= i; ++j) {
          double dp = 0;
          for (int d = 0; d < D; ++d)
            dp += at(dout, i, d) * at(v, j, d);
          const double ds = p[size_t(j)] * (dp - delta);
          for (int d = 0; d < D; ++d) {
            r.dq[base + size_t(i) * D + d] += ds * scale * at(k, j, d);
            r.dk[base + size_t(j) * D + d] += ds * scale * at(q, i, d);
            r.dv[base + size_t(j) * D + d] += p[size_t(j)] * at(dout, i, d);
          }
          r.dslope[size_t(h)] += ds * (j - i);
        }
      }
    }
  return r;
}

double relErr(const std::vector<float> &got, const std::vector<double> &want) {
  double worst = 0, top = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) // max() would skip a NaN
      return INFINITY;
    worst = std::max(worst, std::abs(double(got[i]) - want[i]));
    top = std::max(top, std::abs(want[i]));
  }
  return worst / std::max(top, 1e-30);
}

attnc_variant *compile(const char *spec, int64_t heads, int64_t headDim, Error &err,
                       int backward = 1, const char *target = "cpu", attnc_dtype dtype = ATTNC_F32,
                       int64_t maxSeq = 0) {
  attnc_compile_options o;
  attnc_compile_options_init(&o);
  o.heads = heads, o.head_dim = headDim, o.backward = backward;
  o.target = target, o.dtype = dtype, o.max_seq = maxSeq;
  attnc_variant *v = nullptr;
  err.e = attnc_compile(spec, nullptr, &o, &v);
  return v;
}

constexpr int B = 2, H = 3, N = 77, D = 64;

/// attnc_backward into dq, dk, dv (and `dparams`), each checked against
/// the reference's within 1e-4 of its largest.
template <class Ref>
void expectBackward(attnc_variant *v, attnc_call &c, std::vector<float> &dout,
                    std::vector<float> &dq, std::vector<float> &dk, std::vector<float> &dv,
                    const Ref &r, int Nk, double tol = 1e-4) {
  c.dout = tensor(dout, {B, H, N, D});
  c.dq = tensor(dq, {B, H, N, D}), c.dk = tensor(dk, {B, H, Nk, D}),
  c.dv = tensor(dv, {B, H, Nk, D});
  Error bwd;
  bwd.e = attnc_backward(v, &c);
  ASSERT_EQ(bwd.e, nullptr) << bwd.message();
  EXPECT_LT(relErr(dq, r.dq), tol);
  EXPECT_LT(relErr(dk, r.dk), tol);
  EXPECT_LT(relErr(dv, r.dv), tol);
}

TEST(CApi, CausalForwardAndBackwardMatchDouble) {
  Error err;
  attnc_variant *v = compile("attention a {\n  mask causal\n}\n", H, D, err);
  ASSERT_NE(v, nullptr) << err.message();
  EXPECT_STREQ(attnc_variant_name(v), "a");
  EXPECT_EQ(attnc_variant_num_params(v), 0);
  EXPECT_EQ(attnc_api_version(), ATTNC_C_API_VERSION);
  const size_t n = size_t(B) * H * N * D;
  std::vector<float> q = randn(n, 1), k = randn(n, 2), val = randn(n, 3), dout = randn(n, 4);
  std::vector<float> out(n), lse(size_t(B) * H * N), dq(n), dk(n), dv(n);
  attnc_call c{};
  c.struct_size = sizeof c;
  c.q = tensor(q, {B, H, N, D}), c.k = tensor(k, {B, H, N, D}), c.v = tensor(val, {B, H, N, D});
  c.out = tensor(out, {B, H, N, D}), c.lse = tensor(lse, {B, H, N});
  Error fwd;
  fwd.e = attnc_forward(v, &c);
  ASSERT_EQ(fwd.e, nullptr) << fwd.message();
  Reference r = reference(q, k, val, dout, B, H, N, D, {});
  EXPECT_LT(relErr(out, r.out), 1e-5);
  expectBackward(v, c, dout, dq, dk, dv, r, N);

  // A second compile of the same variant and shape class loads the kernels.
  Error again;
  attnc_variant *w = compile("attention a {\n  mask causal\n}\n", H, D, again);
  ASSERT_NE(w, nullptr) << again.message();
  EXPECT_EQ(attnc_variant_from_cache(w), 1);
  // Another N, same kernels.
  const int N2 = 40;
  const size_t n2 = size_t(B) * H * N2 * D;
  std::vector<float> q2 = randn(n2, 5), k2 = randn(n2, 6), v2 = randn(n2, 7), o2(n2),
                     l2(size_t(B) * H * N2);
  attnc_call c2{};
  c2.struct_size = sizeof c2;
  c2.q = tensor(q2, {B, H, N2, D}), c2.k = tensor(k2, {B, H, N2, D});
  c2.v = tensor(v2, {B, H, N2, D});
  c2.out = tensor(o2, {B, H, N2, D}), c2.lse = tensor(l2, {B, H, N2});
  Error f2;
  f2.e = attnc_forward(w, &c2);
  ASSERT_EQ(f2.e, nullptr) << f2.message();
  EXPECT_LT(relErr(o2, reference(q2, k2, v2, {}, B, H, N2, D, {}).out), 1e-5);
  attnc_variant_free(w);
  attnc_variant_free(v);
}

TEST(CApi, StridedInputsAreRefusedOrCopied) {
  Error err;
  attnc_variant *v = compile("attention a {\n  mask causal\n}\n", H, D, err);
  ASSERT_NE(v, nullptr) << err.message();
  const size_t n = size_t(B) * H * N * D;
  // q stored [B, N, H, D] and viewed as [B, H, N, D] (what q.transpose(1, 2) gives).
  std::vector<float> qBnhd = randn(n, 11), k = randn(n, 12), val = randn(n, 13);
  std::vector<float> out(n), lse(size_t(B) * H * N);
  attnc_call c{};
  c.struct_size = sizeof c;
  c.q = tensor(qBnhd, {B, H, N, D});
  c.q.strides[0] = int64_t(N) * H * D, c.q.strides[1] = D, c.q.strides[2] = int64_t(H) * D;
  c.k = tensor(k, {B, H, N, D}), c.v = tensor(val, {B, H, N, D});
  c.out = tensor(out, {B, H, N, D}), c.lse = tensor(lse, {B, H, N});
  Error refused;
  refused.e = attnc_forward(v, &c);
  ASSERT_NE(refused.e, nullptr);
  EXPECT_NE(refused.message().find("q (f32 [2, 3, 77, 64], strides [14784, 64, 192, 1]): not "
                                   "contiguous"),
            std::string::npos)
      << refused.message();
  c.allow_copies = 1;
  Error copied;
  copied.e = attnc_forward(v, &c);
  ASSERT_EQ(copied.e, nullptr) << copied.message();
  std::vector<float> q(n); // the same values, contiguous
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < N; ++i)
        for (int d = 0; d < D; ++d)
          q[((size_t(b) * H + h) * N + i) * D + d] = qBnhd[((size_t(b) * N + i) * H + h) * D + d];
  EXPECT_LT(relErr(out, reference(q, k, val, {}, B, H, N, D, {}).out), 1e-5);
  attnc_variant_free(v);
}

constexpr const char *kAlibiSpec = "attention alibi {\n  param slope(h) = alibi\n"
                                   "  score s + slope(h) * float(kv - q)\n  mask causal\n}\n";

/// A learned per-head slope (kAlibiSpec: score + slope_h · (key − query)),
/// whatever the target: its ALiBi initial values, then forward within
/// `fwdTol` and dq, dk, dv and dslope within 1e-4 of the double reference,
/// on inputs drawn from `seed` on.
void expectSlopeVariant(attnc_variant *v, unsigned seed, double fwdTol) {
  std::vector<float> slope(H);
  attnc_tensor st = tensor(slope, {H});
  Error ie;
  ie.e = attnc_variant_init_param(v, 0, 0, &st);
  ASSERT_EQ(ie.e, nullptr) << ie.message();
  for (int h = 0; h < H; ++h)
    EXPECT_FLOAT_EQ(slope[size_t(h)], float(std::exp2(-8.0 * (h + 1) / H)));
  const size_t n = size_t(B) * H * N * D;
  std::vector<float> q = randn(n, seed), k = randn(n, seed + 1), val = randn(n, seed + 2),
                     dout = randn(n, seed + 3);
  std::vector<float> out(n), lse(size_t(B) * H * N), dq(n), dk(n), dv(n), dslope(H);
  attnc_call c{};
  c.struct_size = sizeof c;
  c.q = tensor(q, {B, H, N, D}), c.k = tensor(k, {B, H, N, D}), c.v = tensor(val, {B, H, N, D});
  c.params = &st;
  c.out = tensor(out, {B, H, N, D}), c.lse = tensor(lse, {B, H, N});
  Error fwd;
  fwd.e = attnc_forward(v, &c);
  ASSERT_EQ(fwd.e, nullptr) << fwd.message();
  Reference r = reference(q, k, val, dout, B, H, N, D, slope);
  EXPECT_LT(relErr(out, r.out), fwdTol);
  attnc_tensor ds = tensor(dslope, {H});
  c.dparams = &ds;
  expectBackward(v, c, dout, dq, dk, dv, r, N);
  EXPECT_LT(relErr(dslope, r.dslope), 1e-4);
}

TEST(CApi, PerHeadParameterAndItsGradient) {
  Error err;
  attnc_variant *v = compile(kAlibiSpec, H, D, err);
  ASSERT_NE(v, nullptr) << err.message();
  ASSERT_EQ(attnc_variant_num_params(v), 1);
  attnc_param_info info;
  Error pe;
  pe.e = attnc_variant_param(v, 0, &info);
  ASSERT_EQ(pe.e, nullptr) << pe.message();
  EXPECT_STREQ(info.name, "slope");
  EXPECT_EQ(info.ndim, 1);
  EXPECT_EQ(info.shape[0], H);
  EXPECT_EQ(info.learned, 1);
  expectSlopeVariant(v, 21, 1e-5);
  attnc_variant_free(v);
}

// Linformer: keys and values projected along the sequence by E and F
// ([k, max_seq], shared by the heads), in double: out, dq, dk, dv, dE, dF.
struct LowRankReference {
  std::vector<double> out, dq, dk, dv, dE, dF;
};
LowRankReference lowRankReference(const std::vector<float> &q, const std::vector<float> &k,
                                  const std::vector<float> &v, const std::vector<float> &dout,
                                  const std::vector<float> &E, const std::vector<float> &F, int B,
                                  int H, int N, int D, int R, int Nmax) {
  LowRankReference r;
  const size_t all = size_t(B) * H * N * D;
  r.out.assign(all, 0), r.dq.assign(all, 0), r.dk.assign(all, 0), r.dv.assign(all, 0);
  r.dE.assign(size_t(R) * Nmax, 0), r.dF.assign(size_t(R) * Nmax, 0);
  const double scale = 1.0 / std::sqrt(double(D));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const size_t base = (size_t(b) * H + h) * N * D;
      std::vector<double> kp(size_t(R) * D, 0), vp(size_t(R) * D, 0);
      for (int j = 0; j < R; ++j)
        for (int n = 0; n < N; ++n)
          for (int d = 0; d < D; ++d) {
            kp[size_t(j) * D + d] += double(E[size_t(j) * Nmax + n]) * k[base + size_t(n) * D + d];
            vp[size_t(j) * D + d] += double(F[size_t(j) * Nmax + n]) * v[base + size_t(n) * D + d];
          }
      std::vector<double> dkp(kp.size(), 0), dvp(vp.size(), 0);
      for (int i = 0; i < N; ++i) {
        std::vector<double> p(static_cast<size_t>(R));
        double m = -1e300, z = 0;
        for (int j = 0; j < R; ++j) {
          double sc = 0;
          for (int d = 0; d < D; ++d)
            sc += double(q[base + size_t(i) * D + d]) * kp[size_t(j) * D + d];
          p[size_t(j)] = sc * scale, m = std::max(m, p[size_t(j)]);
        }
        for (double &x : p)
          z += (x = std::exp(x - m));
        for (double &x : p)
          x /= z;
        double delta = 0;
        for (int d = 0; d < D; ++d) {
          double o = 0;
          for (int j = 0; j < R; ++j)
            o += p[size_t(j)] * vp[size_t(j) * D + d];
          r.out[base + size_t(i) * D + d] = o;
          delta += o * dout[base + size_t(i) * D + d];
        }
        for (int j = 0; j < R; ++j) {
          double dp = 0;
          for (int d = 0; d < D; ++d)
            dp += double(dout[base + size_t(i) * D + d]) * vp[size_t(j) * D + d];
          const double ds = p[size_t(j)] * (dp - delta);
          for (int d = 0; d < D; ++d) {
            r.dq[base + size_t(i) * D + d] += ds * scale * kp[size_t(j) * D + d];
            dkp[size_t(j) * D + d] += ds * scale * q[base + size_t(i) * D + d];
            dvp[size_t(j) * D + d] += p[size_t(j)] * dout[base + size_t(i) * D + d];
          }
        }
      }
      for (int j = 0; j < R; ++j)
        for (int n = 0; n < N; ++n)
          for (int d = 0; d < D; ++d) {
            r.dk[base + size_t(n) * D + d] +=
                double(E[size_t(j) * Nmax + n]) * dkp[size_t(j) * D + d];
            r.dv[base + size_t(n) * D + d] +=
                double(F[size_t(j) * Nmax + n]) * dvp[size_t(j) * D + d];
            r.dE[size_t(j) * Nmax + n] += dkp[size_t(j) * D + d] * k[base + size_t(n) * D + d];
            r.dF[size_t(j) * Nmax + n] += dvp[size_t(j) * D + d] * v[base + size_t(n) * D + d];
          }
    }
  return r;
}

constexpr const char *kLowRankSpec = "attention lin {\n  kv lowrank(k = 16, share = headwise)\n}\n";
constexpr int kLowRankK = 16, kLowRankColumns = 96; // E, F: [16, 96]; the calls use N = 77 of them

/// kLowRankSpec compiled with max_seq kLowRankColumns, whatever the target:
/// E and F drawn apart from one seed, then forward within `fwdTol` and dq,
/// dk, dv, dE and dF within 1e-4 of the double Linformer reference, on
/// inputs drawn from `seed` on. Then keys beyond max_seq are refused.
void expectLowRankVariant(attnc_variant *v, unsigned seed, double fwdTol) {
  const int R = kLowRankK, Nmax = kLowRankColumns;
  std::vector<float> E(size_t(R) * Nmax), F(E.size());
  attnc_tensor params[2] = {tensor(E, {R, Nmax}), tensor(F, {R, Nmax})};
  for (int i = 0; i < 2; ++i) {
    Error ie;
    ie.e = attnc_variant_init_param(v, i, 7, &params[i]);
    ASSERT_EQ(ie.e, nullptr) << ie.message();
  }
  EXPECT_NE(E, F); // drawn apart
  const size_t n = size_t(B) * H * N * D;
  std::vector<float> q = randn(n, seed), k = randn(n, seed + 1), val = randn(n, seed + 2),
                     dout = randn(n, seed + 3);
  std::vector<float> out(n), lse(size_t(B) * H * N), dq(n), dk(n), dv(n), dE(E.size()),
      dF(F.size());
  attnc_call c{};
  c.struct_size = sizeof c;
  c.q = tensor(q, {B, H, N, D}), c.k = tensor(k, {B, H, N, D}), c.v = tensor(val, {B, H, N, D});
  c.params = params;
  c.out = tensor(out, {B, H, N, D}), c.lse = tensor(lse, {B, H, N});
  Error fwd;
  fwd.e = attnc_forward(v, &c);
  ASSERT_EQ(fwd.e, nullptr) << fwd.message();
  LowRankReference r = lowRankReference(q, k, val, dout, E, F, B, H, N, D, R, Nmax);
  EXPECT_LT(relErr(out, r.out), fwdTol);
  attnc_tensor dparams[2] = {tensor(dE, {R, Nmax}), tensor(dF, {R, Nmax})};
  c.dparams = dparams;
  expectBackward(v, c, dout, dq, dk, dv, r, N);
  EXPECT_LT(relErr(dE, r.dE), 1e-4);
  EXPECT_LT(relErr(dF, r.dF), 1e-4);
  // Keys beyond max_seq do not fit E.
  const int Nlong = 100;
  const size_t nl = size_t(B) * H * Nlong * D;
  std::vector<float> ql(nl), ol(nl), ll(size_t(B) * H * Nlong);
  attnc_call cl = c;
  cl.q = tensor(ql, {B, H, Nlong, D}), cl.k = cl.q, cl.v = cl.q;
  cl.out = tensor(ol, {B, H, Nlong, D}), cl.lse = tensor(ll, {B, H, Nlong});
  Error tooLong;
  tooLong.e = attnc_forward(v, &cl);
  EXPECT_NE(tooLong.message().find("max_seq 96"), std::string::npos) << tooLong.message();
}

TEST(CApi, LowRankParametersAndGradients) {
  Error err;
  attnc_variant *v = compile(kLowRankSpec, H, D, err, 1, "cpu", ATTNC_F32, kLowRankColumns);
  ASSERT_NE(v, nullptr) << err.message();
  ASSERT_EQ(attnc_variant_num_params(v), 2);
  attnc_param_info e{}, f{};
  Error pe, pf;
  pe.e = attnc_variant_param(v, 0, &e);
  pf.e = attnc_variant_param(v, 1, &f);
  ASSERT_EQ(pe.e, nullptr) << pe.message();
  EXPECT_STREQ(e.name, "E");
  EXPECT_STREQ(f.name, "F");
  ASSERT_EQ(e.ndim, 2);
  EXPECT_EQ(e.shape[0], kLowRankK);
  EXPECT_EQ(e.shape[1], kLowRankColumns);
  expectLowRankVariant(v, 31, 1e-5);
  attnc_variant_free(v);
}

TEST(CApi, ErrorsNameThePlace) {
  Error syntax;
  EXPECT_EQ(compile("attention a {\n  mask causul\n}\n", H, D, syntax), nullptr);
  EXPECT_NE(syntax.message().find("<spec>:2:"), std::string::npos) << syntax.message();
  Error missing;
  EXPECT_EQ(compile("/nonexistent/x.attn", H, D, missing), nullptr);
  EXPECT_NE(missing.message().find("/nonexistent/x.attn"), std::string::npos) << missing.message();
  Error badHeads;
  EXPECT_EQ(compile("attention a {\n  mask causal\n}\n", 0, D, badHeads), nullptr);
  EXPECT_NE(badHeads.message().find("heads = 0"), std::string::npos) << badHeads.message();

  Error err;
  attnc_variant *v = compile("attention a {\n  mask causal\n}\n", H, D, err, /*backward=*/0);
  ASSERT_NE(v, nullptr) << err.message();
  const size_t n = size_t(B) * H * N * D;
  std::vector<float> q = randn(n, 1), out(n), lse(size_t(B) * H * N);
  attnc_call c{};
  c.struct_size = sizeof c;
  c.q = tensor(q, {B, H, N, D}), c.k = c.q, c.v = c.q;
  c.out = tensor(out, {B, H, N, D}), c.lse = tensor(lse, {B, H, N});
  c.v.shape[3] = 32; // a wrong head dim
  Error shape;
  shape.e = attnc_forward(v, &c);
  EXPECT_NE(shape.message().find("v (f32 [2, 3, 77, 32]"), std::string::npos) << shape.message();
  EXPECT_NE(shape.message().find("expected shape [2, 3, 77, 64]"), std::string::npos);
  c.v = c.q;
  c.q.dtype = ATTNC_F16;
  Error dtype;
  dtype.e = attnc_forward(v, &c);
  EXPECT_NE(dtype.message().find("expected f32"), std::string::npos) << dtype.message();
  c.q.dtype = ATTNC_F32;
  Error noBackward;
  noBackward.e = attnc_backward(v, &c);
  EXPECT_NE(noBackward.message().find("without its backward"), std::string::npos)
      << noBackward.message();
  attnc_variant_free(v);
}

//===-- CUDA kernels through the ABI, on the SIMT emulator ---------------===//
//
// Target cuda-sim runs the CUDA kernels and the device half of the ABI
// (CApiCuda.cpp: the device entries, the per-head parameters gathered by
// device copies, the stream plumbing) on the CPU, with host memory as the
// device's. A GPU runs the same code with target cuda
// (scripts/device-check.sh).

/// bf16 storage of `x` (round to nearest even), and back.
std::vector<uint16_t> toBf16(const std::vector<float> &x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], 4);
    bits += 0x7fff + ((bits >> 16) & 1);
    out[i] = uint16_t(bits >> 16);
  }
  return out;
}
std::vector<float> fromBf16(const std::vector<uint16_t> &x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t bits = uint32_t(x[i]) << 16;
    std::memcpy(&out[i], &bits, 4);
  }
  return out;
}
attnc_tensor bf16Tensor(std::vector<uint16_t> &data, std::vector<int64_t> shape) {
  std::vector<float> none;
  attnc_tensor t = tensor(none, std::move(shape));
  t.data = data.data(), t.dtype = ATTNC_BF16;
  return t;
}

TEST(CApiCudaSim, CausalF32AndBf16KernelsMatchDouble) {
  const size_t n = size_t(B) * H * N * D;
  std::vector<float> q = randn(n, 41), k = randn(n, 42), val = randn(n, 43), dout = randn(n, 44);
  Reference r = reference(q, k, val, dout, B, H, N, D, {});
  // f32 kernels, then bf16 kernels on the same f32 tensors (converted on
  // the device), each against the double reference.
  for (attnc_dtype kernels : {ATTNC_F32, ATTNC_BF16}) {
    SCOPED_TRACE(kernels == ATTNC_F32 ? "f32 kernels" : "bf16 kernels");
    const double tol = kernels == ATTNC_F32 ? 1e-4 : 2e-2;
    Error err;
    attnc_variant *v =
        compile("attention a {\n  mask causal\n}\n", H, D, err, 1, "cuda-sim", kernels);
    ASSERT_NE(v, nullptr) << err.message();
    EXPECT_EQ(attnc_variant_tensor_dtype(v), kernels);
    std::vector<float> out(n), lse(size_t(B) * H * N), dq(n), dk(n), dv(n);
    attnc_call c{};
    c.struct_size = sizeof c;
    c.q = tensor(q, {B, H, N, D}), c.k = tensor(k, {B, H, N, D}), c.v = tensor(val, {B, H, N, D});
    c.out = tensor(out, {B, H, N, D}), c.lse = tensor(lse, {B, H, N});
    Error fwd;
    fwd.e = attnc_forward(v, &c);
    ASSERT_EQ(fwd.e, nullptr) << fwd.message();
    EXPECT_LT(relErr(out, r.out), tol);
    expectBackward(v, c, dout, dq, dk, dv, r, N, tol);

    if (kernels == ATTNC_BF16) { // bf16 tensors, read and written in place
      std::vector<uint16_t> qb = toBf16(q), kb = toBf16(k), vb = toBf16(val), ob(n);
      attnc_call d = c;
      d.q = bf16Tensor(qb, {B, H, N, D}), d.k = bf16Tensor(kb, {B, H, N, D});
      d.v = bf16Tensor(vb, {B, H, N, D}), d.out = bf16Tensor(ob, {B, H, N, D});
      Error direct;
      direct.e = attnc_forward(v, &d);
      ASSERT_EQ(direct.e, nullptr) << direct.message();
      EXPECT_LT(relErr(fromBf16(ob), r.out), tol);
      d.q.dtype = ATTNC_F16; // neither f32 nor the kernels' dtype
      Error mixed;
      mixed.e = attnc_forward(v, &d);
      EXPECT_NE(mixed.message().find("takes f32 or bf16 tensors"), std::string::npos)
          << mixed.message();
    }
    attnc_variant_free(v);
  }
}

TEST(CApiCudaSim, PerHeadSlopeAndLowRankGradients) {
  // A learned slope: gathered into the handle's [P, H] buffer and its
  // gradient copied out, by device copies.
  Error err;
  attnc_variant *v = compile(kAlibiSpec, H, D, err, 1, "cuda-sim");
  ASSERT_NE(v, nullptr) << err.message();
  expectSlopeVariant(v, 51, 1e-4);
  attnc_variant_free(v);
  // Low-rank: E and F from the caller, dE and dF into the caller's.
  Error lerr;
  attnc_variant *lin = compile(kLowRankSpec, H, D, lerr, 1, "cuda-sim", ATTNC_F32, kLowRankColumns);
  ASSERT_NE(lin, nullptr) << lerr.message();
  expectLowRankVariant(lin, 51, 1e-4);
  attnc_variant_free(lin);
}

/// Dense softmax attention in double, keys of their own length Nk: out,
/// and with dout dq, dk, dv.
Reference crossReference(const std::vector<float> &q, const std::vector<float> &k,
                         const std::vector<float> &v, const std::vector<float> &dout, int Nq,
                         int Nk) {
  Reference r;
  r.out.assign(size_t(B) * H * Nq * D, 0), r.dq.assign(r.out.size(), 0);
  r.dk.assign(size_t(B) * H * Nk * D, 0), r.dv.assign(r.dk.size(), 0);
  const double scale = 1.0 / std::sqrt(double(D));
  for (int bh = 0; bh < B * H; ++bh) {
    const size_t qb = size_t(bh) * Nq * D, kb = size_t(bh) * Nk * D;
    for (int i = 0; i < Nq; ++i) {
      std::vector<double> p(static_cast<size_t>(Nk));
      double m = -1e300, z = 0, delta = 0;
      for (int j = 0; j < Nk; ++j) {
        double s = 0;
        for (int d = 0; d < D; ++d)
          s += double(q[qb + size_t(i) * D + d]) * k[kb + size_t(j) * D + d];
        p[size_t(j)] = s * scale, m = std::max(m, p[size_t(j)]);
      }
      for (double &x : p)
        z += (x = std::exp(x - m));
      for (int d = 0; d < D; ++d) {
        double o = 0;
        for (int j = 0; j < Nk; ++j)
          o += p[size_t(j)] / z * v[kb + size_t(j) * D + d];
        r.out[qb + size_t(i) * D + d] = o;
        delta += o * dout[qb + size_t(i) * D + d];
      }
      for (int j = 0; j < Nk; ++j) {
        const double pj = p[size_t(j)] / z;
        double dp = 0;
        for (int d = 0; d < D; ++d)
          dp += double(dout[qb + size_t(i) * D + d]) * v[kb + size_t(j) * D + d];
        const double ds = pj * (dp - delta);
        for (int d = 0; d < D; ++d) {
          r.dq[qb + size_t(i) * D + d] += ds * scale * k[kb + size_t(j) * D + d];
          r.dk[kb + size_t(j) * D + d] += ds * scale * q[qb + size_t(i) * D + d];
          r.dv[kb + size_t(j) * D + d] += pj * dout[qb + size_t(i) * D + d];
        }
      }
    }
  }
  return r;
}

TEST(CApiCudaSim, CrossAttentionKeysOfTheirOwnLength) {
  const int Nk = 50; // 77 queries, 50 keys and values
  const size_t nq = size_t(B) * H * N * D, nk = size_t(B) * H * Nk * D;
  std::vector<float> q = randn(nq, 71), k = randn(nk, 72), val = randn(nk, 73),
                     dout = randn(nq, 74);
  Reference r = crossReference(q, k, val, dout, N, Nk);
  for (attnc_dtype kernels : {ATTNC_F32, ATTNC_BF16}) {
    SCOPED_TRACE(kernels == ATTNC_F32 ? "f32 kernels" : "bf16 kernels");
    const double tol = kernels == ATTNC_F32 ? 1e-4 : 2e-2;
    Error err;
    attnc_variant *v = compile("attention d {\n}\n", H, D, err, 1, "cuda-sim", kernels);
    ASSERT_NE(v, nullptr) << err.message();
    std::vector<float> out(nq), lse(size_t(B) * H * N), dq(nq), dk(nk), dv(nk);
    attnc_call c{};
    c.struct_size = sizeof c;
    c.q = tensor(q, {B, H, N, D}), c.k = tensor(k, {B, H, Nk, D}), c.v = tensor(val, {B, H, Nk, D});
    c.out = tensor(out, {B, H, N, D}), c.lse = tensor(lse, {B, H, N});
    Error fwd;
    fwd.e = attnc_forward(v, &c);
    ASSERT_EQ(fwd.e, nullptr) << fwd.message();
    EXPECT_LT(relErr(out, r.out), tol);
    expectBackward(v, c, dout, dq, dk, dv, r, Nk, tol);
    c.v.shape[2] = Nk + 1; // values must match the keys
    Error mismatch;
    mismatch.e = attnc_forward(v, &c);
    EXPECT_NE(mismatch.message().find("v (f32 [2, 3, 51, 64]"), std::string::npos)
        << mismatch.message();
    EXPECT_NE(mismatch.message().find("expected shape [2, 3, 50, 64]"), std::string::npos);
    attnc_variant_free(v);
  }
}

TEST(CApiCudaSim, ErrorsNameThePlace) {
  Error err;
  attnc_variant *v = compile("attention a {\n  mask causal\n}\n", H, D, err, 1, "cuda-sim");
  ASSERT_NE(v, nullptr) << err.message();
  const size_t n = size_t(B) * H * N * D;
  std::vector<float> q = randn(n, 1), out(n), lse(size_t(B) * H * N);
  attnc_call c{};
  c.struct_size = sizeof c;
  c.q = tensor(q, {B, H, N, D}), c.k = c.q, c.v = c.q;
  c.out = tensor(out, {B, H, N, D}), c.lse = tensor(lse, {B, H, N});
  c.k.device = ATTNC_CUDA;
  Error device;
  device.e = attnc_forward(v, &c);
  EXPECT_NE(device.message().find("k: on a CUDA device; this variant runs on the SIMT emulator"),
            std::string::npos)
      << device.message();
  c.k = c.q;
  std::swap(c.v.strides[2], c.v.strides[3]), std::swap(c.v.shape[2], c.v.shape[3]);
  c.v.shape[2] = N, c.v.shape[3] = D, c.v.strides[2] = 1,
  c.v.strides[3] = N; // [.., D, N] read as [.., N, D]
  c.allow_copies = 1; // CUDA calls never copy
  Error strided;
  strided.e = attnc_forward(v, &c);
  EXPECT_NE(strided.message().find("v (f32 [2, 3, 77, 64], strides [14784, 4928, 1, 77]): not "
                                   "contiguous; CUDA calls never copy"),
            std::string::npos)
      << strided.message();
  c.v = c.q;
  c.out.data = static_cast<char *>(c.out.data) + 4; // no longer 16-byte aligned
  Error misaligned;
  misaligned.e = attnc_forward(v, &c);
  EXPECT_NE(
      misaligned.message().find("tensor 'out' starts at an address that is not 16-byte aligned"),
      std::string::npos)
      << misaligned.message();
  attnc_variant_free(v);

  Error noGpu;
  attnc_compile_options o;
  attnc_compile_options_init(&o);
  o.heads = H, o.head_dim = D, o.target = "cuda";
  attnc_variant *none = nullptr;
  noGpu.e = attnc_compile("attention a {\n}\n", nullptr, &o, &none);
  if (noGpu.e) { // no driver or no GPU here: the message says so
    EXPECT_NE(noGpu.message().find("target cuda"), std::string::npos) << noGpu.message();
  }
  attnc_variant_free(none);
  Error badTarget;
  o.target = "tpu";
  badTarget.e = attnc_compile("attention a {\n}\n", nullptr, &o, &none);
  EXPECT_NE(badTarget.message().find("target 'tpu': expected cpu, cuda or cuda-sim"),
            std::string::npos)
      << badTarget.message();
  o.target = "cuda-sim", o.arch = "sm_42";
  Error badArch;
  badArch.e = attnc_compile("attention a {\n}\n", nullptr, &o, &none);
  EXPECT_NE(badArch.message().find("sm_70 or newer, found 'sm_42'"), std::string::npos)
      << badArch.message();
}

//===-- attnc_load: artifacts that `attnc compile` wrote -----------------===//

/// `attnc compile` of a causal variant at H = 3, D = 64 (a model fixes
/// them) for `target`, into a fresh directory; its path.
std::string compileArtifact(const std::string &target) {
  const std::string dir = testing::TempDir() + "capi-artifact-" + target;
  const std::string spec = dir + ".attn";
  FILE *f = std::fopen(spec.c_str(), "w");
  if (!f)
    return "";
  std::fputs("attention a {\n  mask causal\n}\n"
             "model m { vocab 64 seq 128 d_model 192 heads 3 layers 1 dtype fp32 "
             "objective causal_lm layer { attention a ffn } }\n",
             f);
  std::fclose(f);
  const std::string cmd = std::string(ATTNC_CLI) + " compile " + spec + " --target " + target +
                          " -o " + dir + " > /dev/null 2>&1";
  return std::system(("rm -rf " + dir).c_str()) == 0 && std::system(cmd.c_str()) == 0 ? dir : "";
}

TEST(CApi, LoadsCompiledArtifacts) {
  const size_t n = size_t(B) * H * N * D;
  std::vector<float> q = randn(n, 61), k = randn(n, 62), val = randn(n, 63), dout = randn(n, 64);
  Reference r = reference(q, k, val, dout, B, H, N, D, {});
  // The CPU artifact on the CPU, the CUDA one on the emulator.
  for (const char *target : {"cpu", "cuda-sim"}) {
    SCOPED_TRACE(target);
    const std::string dir = compileArtifact(std::string(target) == "cpu" ? "cpu" : "cuda");
    ASSERT_FALSE(dir.empty()) << "attnc compile failed";
    attnc_compile_options o;
    attnc_compile_options_init(&o);
    o.heads = H, o.head_dim = D, o.target = target;
    attnc_variant *v = nullptr;
    Error err;
    err.e = attnc_load(dir.c_str(), "m_attention", &o, &v);
    ASSERT_NE(v, nullptr) << err.message();
    EXPECT_EQ(attnc_variant_num_params(v), 0);
    std::vector<float> out(n), lse(size_t(B) * H * N), dq(n), dk(n), dv(n);
    attnc_call c{};
    c.struct_size = sizeof c;
    c.q = tensor(q, {B, H, N, D}), c.k = tensor(k, {B, H, N, D}), c.v = tensor(val, {B, H, N, D});
    c.out = tensor(out, {B, H, N, D}), c.lse = tensor(lse, {B, H, N});
    Error fwd;
    fwd.e = attnc_forward(v, &c);
    ASSERT_EQ(fwd.e, nullptr) << fwd.message();
    EXPECT_LT(relErr(out, r.out), 1e-4);
    expectBackward(v, c, dout, dq, dk, dv, r, N);
    attnc_variant_free(v);

    Error wrongDim, wrongTarget, noKernel;
    o.head_dim = 32;
    wrongDim.e = attnc_load(dir.c_str(), nullptr, &o, &v);
    EXPECT_NE(wrongDim.message().find("compiled for head dim 64"), std::string::npos)
        << wrongDim.message();
    o.head_dim = D, o.target = std::string(target) == "cpu" ? "cuda-sim" : "cpu";
    wrongTarget.e = attnc_load(dir.c_str(), nullptr, &o, &v);
    EXPECT_NE(wrongTarget.message().find("kernels; target"), std::string::npos)
        << wrongTarget.message();
    o.target = target;
    noKernel.e = attnc_load(dir.c_str(), "nope", &o, &v);
    EXPECT_NE(noKernel.message().find("no forward kernel 'nope' (it has: attn0_f32_d64)"),
              std::string::npos)
        << noKernel.message();
  }
  attnc_compile_options o;
  attnc_compile_options_init(&o);
  o.heads = H, o.head_dim = D;
  attnc_variant *v = nullptr;
  Error missing;
  missing.e = attnc_load("/nonexistent/artifact", nullptr, &o, &v);
  EXPECT_NE(missing.message().find("/nonexistent/artifact"), std::string::npos)
      << missing.message();
}

} // namespace
