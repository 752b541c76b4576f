//===- CudaEmulatedAttention.h - The attention kernels on the host --------===//
//
// The flash kernels (kernels/cuda/attnc) compiled by the host
// compiler and run on the block emulator (simt_emulator.h,
// docs/emulator.md), with ldmatrix, mma and cp.async from
// tensor_core_emulator.h, against a double-precision reference of
// docs/kernels.md's semantics: runEmulated and runDefaultTiles. Included by
// CudaKernelsTest.cpp (the m16n8k16 path, cp.async) and, with
// ATTNC_EMULATE_ARCH=700 defined first, by CudaKernelsVoltaTest.cpp
// (Volta's m8n8k4 path, register-staged copies).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_TEST_UNIT_CUDAEMULATEDATTENTION_H
#define ATTNC_TEST_UNIT_CUDAEMULATEDATTENTION_H

#include "attnc/abi/TileModel.h"

#include "DropoutReference.h"

#include <gtest/gtest.h>

// The block emulator, what tests hand the kernels (CudaEmulator.h), then
// ldmatrix, mma and cp.async (tensor_core_emulator.h), then the kernels.
#include "CudaEmulator.h"

#include "attnc/tensor_core_emulator.h"

#include "attnc/flash_bwd.cuh"
#include "attnc/flash_fwd.cuh"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

namespace {

/// Dense attention, and the modified variant of the NVRTC test with a
/// narrower window (CudaEmulator.h).
constexpr int kEmuWindow = 20; ///< keep q - kv < 20: bites on small shapes
using EmuDense = emu::DenseVariant;
using EmuMod = emu::ModVariant<kEmuWindow>;
/// The two with attention dropout at kEmuDropout.
using EmuDenseDrop = emu::WithDropout<EmuDense>;
using EmuModDrop = emu::WithDropout<EmuMod>;
constexpr float kEmuDropout = 0.25f;
/// Plain causal attention: no parameters, so no dparams reduction (whose
/// barriers would order what the kernels' own barriers must).
struct EmuCausal : emu::DenseVariant {
  static constexpr bool kCausal = true;
};

//===-- Reference (double) ------------------------------------------------===//

struct Problem {
  int B, H, Nq, Nk, D;
  float scale;
  bool mod; ///< EmuMod (else EmuDense or EmuCausal)
  std::vector<int> lengths;
  std::vector<float> params;        ///< [2 * H]
  std::vector<float> q, k, v, dout; ///< already rounded to the kernel's T
  float dropout = 0;                ///< attention dropout (0: none)
  unsigned long long dropoutSeed = 0;
  unsigned dropoutOffset = 0;
  bool causal = false; ///< EmuCausal
};

/// The dropout factor of (b, h, i, j): 0 or 1 / (1 - p) by the mask of
/// kernels/abi/attnc/abi/Philox.h (docs/kernels.md), 1 without dropout.
double refDropout(const Problem &p, int b, int h, int i, int j) {
  return refDropoutFactor(p.dropoutSeed, p.dropoutOffset, b * p.H + h, i, j, p.dropout);
}

bool refKept(const Problem &p, int b, int i, int j) {
  if (!p.mod)
    return !p.causal || j <= i;
  return j <= i && j < p.lengths[b] && i - j < kEmuWindow;
}

/// score(s) and, with d != nullptr, d = {dscore/ds, dscore/dcap, dscore/dslope}.
double refScore(const Problem &p, double s, int h, int i, int j, double *d = nullptr) {
  if (!p.mod) {
    if (d)
      d[0] = 1, d[1] = d[2] = 0;
    return s;
  }
  const double cap = p.params[h], slope = p.params[p.H + h], th = std::tanh(s / cap);
  if (d) {
    d[0] = 1 - th * th;
    d[1] = th - s / cap * (1 - th * th);
    d[2] = j - i;
  }
  return cap * th + slope * (j - i);
}

double dot(const float *a, const float *b, int n) {
  double r = 0;
  for (int x = 0; x < n; ++x)
    r += double(a[x]) * b[x];
  return r;
}

void refForward(const Problem &p, std::vector<double> &out, std::vector<double> &lse) {
  const int D = p.D;
  out.assign(size_t(p.B) * p.H * p.Nq * D, 0);
  lse.assign(size_t(p.B) * p.H * p.Nq, -std::numeric_limits<double>::infinity());
  std::vector<double> s(p.Nk);
  for (int b = 0; b < p.B; ++b)
    for (int h = 0; h < p.H; ++h)
      for (int i = 0; i < p.Nq; ++i) {
        const size_t bh = size_t(b) * p.H + h, row = bh * p.Nq + i;
        double m = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < p.Nk; ++j) {
          s[j] = -std::numeric_limits<double>::infinity();
          if (refKept(p, b, i, j))
            s[j] = refScore(p, p.scale * dot(&p.q[row * D], &p.k[(bh * p.Nk + j) * D], D), h, i, j);
          m = std::max(m, s[j]);
        }
        if (m == -std::numeric_limits<double>::infinity())
          continue;
        double l = 0;
        for (int j = 0; j < p.Nk; ++j)
          l += std::exp(s[j] - m);
        for (int j = 0; j < p.Nk; ++j) {
          const double w = std::exp(s[j] - m) / l * refDropout(p, b, h, i, j);
          for (int d = 0; d < D; ++d)
            out[row * D + d] += w * p.v[(bh * p.Nk + j) * D + d];
        }
        lse[row] = m + std::log(l);
      }
}

/// Gradients from the kernel's view of out (rounded) and lse (fp32).
void refBackward(const Problem &p, const std::vector<float> &out, const std::vector<float> &lse,
                 std::vector<double> &dq, std::vector<double> &dk, std::vector<double> &dv,
                 std::vector<double> &dparams) {
  const int D = p.D;
  dq.assign(p.q.size(), 0);
  dk.assign(p.k.size(), 0);
  dv.assign(p.v.size(), 0);
  dparams.assign(2 * p.H, 0);
  for (int b = 0; b < p.B; ++b)
    for (int h = 0; h < p.H; ++h)
      for (int i = 0; i < p.Nq; ++i) {
        const size_t bh = size_t(b) * p.H + h, row = bh * p.Nq + i;
        if (std::isinf(lse[row]))
          continue;
        const double delta = dot(&p.dout[row * D], &out[row * D], D);
        for (int j = 0; j < p.Nk; ++j) {
          if (!refKept(p, b, i, j))
            continue;
          const size_t col = bh * p.Nk + j;
          double d[3];
          const double sc = refScore(p, p.scale * dot(&p.q[row * D], &p.k[col * D], D), h, i, j, d);
          const double pr = std::exp(sc - lse[row]), z = refDropout(p, b, h, i, j);
          const double ds = pr * (z * dot(&p.dout[row * D], &p.v[col * D], D) - delta);
          const double g = ds * d[0];
          for (int x = 0; x < D; ++x) {
            dq[row * D + x] += p.scale * g * p.k[col * D + x];
            dk[col * D + x] += p.scale * g * p.q[row * D + x];
            dv[col * D + x] += pr * z * p.dout[row * D + x];
          }
          dparams[h] += ds * d[1];
          dparams[p.H + h] += ds * d[2];
        }
      }
}

//===-- Running the kernels -----------------------------------------------===//

using emu::Buffer;

/// Runs a kernel body over a grid with `smem` bytes of dynamic shared
/// memory, one emulated block at a time under emu::schedule, with shared
/// memory reset to NaNs for each block; false (and a test failure naming
/// the check) when the emulator finds a fault.
bool launch(long long gx, int gy, int threads, size_t smem, const std::function<void()> &body) {
  // What a GPU takes: the grids are the runtime's (TileModel.h), flat in x.
  EXPECT_LE(gy, 65535) << "gridDim.y over CUDA's limit";
  EXPECT_LE(gx, attnc::tile::kMaxGridX) << "gridDim.x over CUDA's limit";
  if (emu::launchSmem(gx, gy, threads, smem, body))
    return true;
  ADD_FAILURE() << "schedule " << emu::schedule.name() << ": " << emu::lastError;
  return false;
}

/// max |got - ref| <= tol * max |ref|; infinities must match exactly and
/// everything else be finite (NaN marks an element never written).
void expectClose(const char *what, const std::vector<float> &got, const std::vector<double> &ref,
                 double tol) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double maxRef = 0, maxErr = 0;
  size_t worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i])) {
      ASSERT_EQ(double(got[i]), ref[i]) << what << "[" << i << "]";
      continue;
    }
    ASSERT_TRUE(std::isfinite(got[i])) << what << "[" << i << "] = " << got[i];
    maxRef = std::max(maxRef, std::fabs(ref[i]));
    const double err = std::fabs(got[i] - ref[i]);
    if (err > maxErr)
      maxErr = err, worst = i;
  }
  std::printf("  %-8s max |err| / max |ref| = %.2e (tolerance %.0e)\n", what,
              maxErr / std::max(maxRef, 1e-3), tol);
  EXPECT_LE(maxErr, tol * std::max(maxRef, 1e-3))
      << what << ": worst element " << worst << " got " << got[worst] << " want " << ref[worst]
      << " (max |ref| " << maxRef << ")";
}

Problem makeProblem(int B, int H, int Nq, int Nk, int D, bool mod, bool roundHalf, bool roundBf16) {
  Problem p{B, H, Nq, Nk, D, 1.0f / std::sqrt(float(D)), mod, {}, {}, {}, {}, {}, {}};
  for (int b = 0; b < B; ++b) // full, partial and empty (b = 2) key sets
    p.lengths.push_back(b == 0 ? Nk : b == 1 ? Nk - 13 : 0);
  for (int h = 0; h < H; ++h)
    p.params.push_back(2.5f + h);
  for (int h = 0; h < H; ++h)
    p.params.push_back(0.03f * (h + 1));
  unsigned state = 12345u;
  auto rnd = [&] {
    state = state * 1664525u + 1013904223u;
    float x = float(state >> 8) / float(1 << 24) * 2.0f - 1.0f;
    if (roundHalf)
      x = __half2float(__float2half_rn(x));
    if (roundBf16)
      x = __bfloat162float(__float2bfloat16_rn(x));
    return x;
  };
  for (auto *t : {&p.q, &p.k, &p.v})
    for (size_t i = 0; i < size_t(B) * H * (t == &p.q ? Nq : Nk) * D; ++i)
      t->push_back(rnd() * 2.0f); // scores of a few units
  for (size_t i = 0; i < size_t(B) * H * Nq * D; ++i)
    p.dout.push_back(rnd());
  return p;
}

/// Low-rank (Linformer) attention reaches the flash kernels as dense
/// attention over k projected keys (docs/kernels.md): K' = E_n K~, V' =
/// F_n V~, where K~, V~ are the n keys and values with rows past
/// lengths[b] (n, n - 13, 0) zeroed and E, F are [k, n]. Replaces p's keys
/// and values (p.Nk = k keys) by such projections, rounded to the kernel's
/// element type; the projection GEMMs themselves are cuBLAS's.
void projectLowRank(Problem &p, int n, bool roundHalf, bool roundBf16) {
  const int k = p.Nk, D = p.D;
  unsigned state = 777u;
  auto rnd = [&] {
    state = state * 1664525u + 1013904223u;
    return double(state >> 8) / double(1 << 24) * 2.0 - 1.0;
  };
  auto round = [&](double x) {
    float f = float(x);
    if (roundHalf)
      f = __half2float(__float2half_rn(f));
    if (roundBf16)
      f = __bfloat162float(__float2bfloat16_rn(f));
    return f;
  };
  std::vector<double> E(size_t(k) * n), F(size_t(k) * n);
  for (double &x : E)
    x = rnd() * 2.0 / std::sqrt(double(n)); // projected scores of a few units
  for (double &x : F)
    x = rnd() * 2.0 / std::sqrt(double(n));
  for (std::vector<float> *t : {&p.k, &p.v}) {
    const std::vector<double> &P = t == &p.k ? E : F;
    t->assign(size_t(p.B) * p.H * k * D, 0.f);
    for (int b = 0; b < p.B; ++b) {
      const int len = b == 0 ? n : b == 1 ? n - 13 : 0;
      for (int h = 0; h < p.H; ++h) {
        std::vector<double> x(size_t(n) * D, 0.0); // K~ or V~ of (b, h)
        for (int j = 0; j < len; ++j)
          for (int d = 0; d < D; ++d)
            x[size_t(j) * D + d] = rnd() * 2.0;
        float *out = &(*t)[(size_t(b) * p.H + h) * k * D];
        for (int r = 0; r < k; ++r)
          for (int d = 0; d < D; ++d) {
            double sum = 0;
            for (int j = 0; j < n; ++j)
              sum += P[size_t(r) * n + j] * x[size_t(j) * D + d];
            out[size_t(r) * D + d] = round(sum);
          }
      }
    }
  }
}

struct EmuShape {
  int B, H, Nq, Nk;
  int lowRankN = 0; ///< > 0: Nk keys projected from this many (projectLowRank)
};

/// What one run of the five kernels writes.
struct EmuOutputs {
  std::vector<float> out, lse, delta, dq, dk, dv, dparams;
  bool guardsIntact = true;
};

/// Forward, then the four backward kernels, of one (T, D, tiles, variant)
/// against the reference, under `schedules` schedules (emu::testSchedules)
/// whose results must agree bit for bit.
template <class T, int D, int FQ, int FKV, int FW, int FS, int BQ, int BKV, int BW, int BS, class V>
void runEmulated(const EmuShape &shape, double tol, int schedules = 3) {
  constexpr bool kHalf = std::is_same_v<T, __half>, kBf16 = std::is_same_v<T, __nv_bfloat16>;
  using namespace attnc::tile;
  Problem p = makeProblem(shape.B, shape.H, shape.Nq, shape.Nk, D, V::kNumParams > 0, kHalf, kBf16);
  if (V::kDropout)
    p.dropout = kEmuDropout, p.dropoutSeed = 0x5eed1234abcdull, p.dropoutOffset = 7;
  if (shape.lowRankN > 0)
    projectLowRank(p, shape.lowRankN, kHalf, kBf16);
  p.causal = V::kCausal && V::kNumParams == 0;
  std::printf("D=%d fwd %dx%d w%d s%d, bwd %dx%d w%d s%d, %s%s%s, B=%d H=%d Nq=%d Nk=%d\n", D, FQ,
              FKV, FW, FS, BQ, BKV, BW, BS,
              V::kNumParams > 0 ? "modified"
              : p.causal        ? "causal"
                                : "dense",
              V::kDropout ? " with dropout" : "",
              shape.lowRankN > 0 ? (" low-rank from " + std::to_string(shape.lowRankN)).c_str()
                                 : "",
              p.B, p.H, p.Nq, p.Nk);
  const int BH = p.B * p.H;
  Buffer<T> q(p.q), k(p.k), v(p.v), dout(p.dout);
  Buffer<int> lengths(0);
  lengths.data.assign(p.lengths.begin(), p.lengths.end());
  lengths.data.insert(lengths.data.begin(), Buffer<int>::kGuard, -1);
  lengths.n = p.lengths.size();
  Buffer<float> params(p.params);

  std::vector<double> refOut, refLse;
  refForward(p, refOut, refLse);
  // Backward from the reference's out (rounded to T) and lse (fp32).
  Buffer<T> bOut(std::vector<float>(refOut.begin(), refOut.end()));
  std::vector<float> lseF(refLse.begin(), refLse.end());
  Buffer<float> bLse(lseF);
  const std::vector<float> outT = bOut.values();
  std::vector<double> rdq, rdk, rdv, rdp;
  refBackward(p, outT, lseF, rdq, rdk, rdv, rdp);
  std::vector<double> refDelta(size_t(BH) * p.Nq);
  for (size_t r = 0; r < refDelta.size(); ++r)
    refDelta[r] = dot(&p.dout[r * D], &outT[r * D], D);
  for (double &x : rdp)
    x += 0.25;

  // The five kernels, into fresh (NaN-filled) outputs.
  auto run = [&](EmuOutputs &o) {
    Buffer<T> out(p.q.size());
    Buffer<float> lse(size_t(BH) * p.Nq);
    attnc::AttnFwdArgs fa{q.ptr(),
                          k.ptr(),
                          v.ptr(),
                          out.ptr(),
                          lse.ptr(),
                          lengths.ptr(),
                          V::kNumParams ? params.ptr() : nullptr,
                          p.B,
                          p.H,
                          p.Nq,
                          p.Nk,
                          p.scale,
                          p.dropout,
                          p.dropoutOffset,
                          p.dropoutSeed};
    if (!launch(attnc::tile::queryTileBlocks(p.Nq, FQ, BH), 1, FW * 32,
                fwdSmemBytes(FQ, FKV, D, FS, int(sizeof(T))),
                [&] { attnc::flash_fwd<FQ, FKV, D, FW, FS, T, V>(fa); }))
      return false;
    Buffer<float> delta(size_t(BH) * p.Nq);
    Buffer<T> dq(p.q.size()), dk(p.k.size()), dv(p.v.size());
    Buffer<float> dparams(std::vector<float>(2 * p.H, 0.25f)); // accumulated into
    const long long ws = bwd_workspace_floats(p.B, p.H, p.Nq, p.Nk, V::kNumParams, BKV);
    Buffer<float> partial(size_t(std::max(ws, 1LL)));
    attnc::AttnBwdArgs ba{q.ptr(),
                          k.ptr(),
                          v.ptr(),
                          bOut.ptr(),
                          dout.ptr(),
                          bLse.ptr(),
                          lengths.ptr(),
                          V::kNumParams ? params.ptr() : nullptr,
                          delta.ptr(),
                          dq.ptr(),
                          dk.ptr(),
                          dv.ptr(),
                          V::kNumParams ? dparams.ptr() : nullptr,
                          V::kNumParams ? partial.ptr() : nullptr,
                          p.B,
                          p.H,
                          p.Nq,
                          p.Nk,
                          p.scale,
                          p.dropout,
                          p.dropoutOffset,
                          p.dropoutSeed};
    const long long qBlocks = attnc::tile::queryTileBlocks(p.Nq, BQ, BH),
                    kvBlocks = attnc::tile::keyTileBlocks(p.Nk, BKV, BH);
    const int e = int(sizeof(T));
    if (!launch(qBlocks, 1, BW * 32, 0,
                [&] { attnc::flash_bwd_preprocess<BQ, BKV, D, BW, BS, T, V>(ba); }) ||
        !launch(kvBlocks, 1, BW * 32, bwdDkdvSmemBytes(BQ, BKV, D, BS, e),
                [&] { attnc::flash_bwd_dkdv<BQ, BKV, D, BW, BS, T, V>(ba); }) ||
        !launch(qBlocks, 1, BW * 32, bwdDqSmemBytes(BQ, BKV, D, BS, e),
                [&] { attnc::flash_bwd_dq<BQ, BKV, D, BW, BS, T, V>(ba); }))
      return false;
    if (V::kNumParams > 0 && !launch(V::kNumParams * p.H, 1, BW * 32, 0, [&] {
          attnc::flash_bwd_dparams<BQ, BKV, D, BW, BS, T, V>(ba);
        }))
      return false;
    o = {out.values(), lse.values(), delta.values(), dq.values(), dk.values(), dv.values(),
         {},           true};
    if (V::kNumParams > 0)
      o.dparams = dparams.values();
    o.guardsIntact = out.guardsIntact() && lse.guardsIntact() && delta.guardsIntact() &&
                     dq.guardsIntact() && dk.guardsIntact() && dv.guardsIntact() &&
                     dparams.guardsIntact() && partial.guardsIntact();
    return true;
  };

  EmuOutputs first;
  const std::vector<emu::Schedule> scheds = emu::testSchedules(schedules, 1 + D + FQ + BKV);
  for (size_t s = 0; s < scheds.size(); ++s) {
    emu::ScheduleScope scope(scheds[s]);
    EmuOutputs o;
    if (!run(o))
      return; // the launch reported why
    EXPECT_TRUE(o.guardsIntact) << scheds[s].name() << ": a kernel wrote out of bounds";
    if (s == 0) {
      expectClose("out", o.out, refOut, tol);
      expectClose("lse", o.lse, refLse, tol);
      expectClose("delta", o.delta, refDelta, tol);
      expectClose("dq", o.dq, rdq, tol);
      expectClose("dk", o.dk, rdk, tol);
      expectClose("dv", o.dv, rdv, tol);
      if (V::kNumParams > 0)
        expectClose("dparams", o.dparams, rdp, tol);
      first = std::move(o);
      continue;
    }
    // A race makes the result depend on the schedule.
    const std::pair<const char *, const std::vector<float> *> got[] = {
        {"out", &o.out}, {"lse", &o.lse}, {"delta", &o.delta},    {"dq", &o.dq},
        {"dk", &o.dk},   {"dv", &o.dv},   {"dparams", &o.dparams}};
    const std::vector<float> *want[] = {&first.out, &first.lse, &first.delta,  &first.dq,
                                        &first.dk,  &first.dv,  &first.dparams};
    bool same = true;
    for (size_t i = 0; i < std::size(got); ++i) {
      const long long at = emu::firstBitDifference(*got[i].second, *want[i]);
      if (at >= 0) {
        same = false;
        ADD_FAILURE() << got[i].first << " under schedule " << scheds[s].name()
                      << " differs from schedule " << scheds[0].name() << " at element " << at
                      << ": " << (*got[i].second)[size_t(at)] << " vs " << (*want[i])[size_t(at)];
      }
    }
    if (same)
      std::printf("  schedule %s: bit-identical to %s\n", scheds[s].name().c_str(),
                  scheds[0].name().c_str());
  }
}

/// runEmulated at the shipped default tiles of (T, D, sm_SM): TileModel.h's
/// defaultTile, forward and backward, as the runtime launches them.
template <class T, int D, int SM, class V>
void runDefaultTiles(const EmuShape &shape, double tol, int schedules = 3) {
  constexpr attnc::tile::TileConfig f = attnc::tile::defaultTile(int(sizeof(T)), D, SM, false);
  constexpr attnc::tile::TileConfig b = attnc::tile::defaultTile(int(sizeof(T)), D, SM, true);
  std::printf("sm_%d default tiles:\n", SM);
  runEmulated<T, D, f.blockQ, f.blockKv, f.warps, f.stages, b.blockQ, b.blockKv, b.warps, b.stages,
              V>(shape, tol, schedules);
}

// Tolerances relative to the tensor's largest magnitude: fp32 accumulates in
// fp32; fp16 and bf16 also round P and dS to T for the second GEMMs.
constexpr double kTolFp32 = 2e-5, kTolFp16 = 1e-2, kTolBf16 = 4e-2;
const EmuShape kLong{2, 2, 150, 133}; // several blocks each way, Nq > Nk
const EmuShape kShort{3, 2, 37, 45};  // batch 2 has no keys (length 0)

} // namespace

#endif // ATTNC_TEST_UNIT_CUDAEMULATEDATTENTION_H
