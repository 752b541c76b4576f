//===- CudaModelStepTest.cpp - The fixed kernels of a CUDA training step --===//
//
// kernels/cuda/attnc/model_step.cuh, no GPU needed: the header,
// compiled by the host compiler, runs on the SIMT block emulator
// (kernels/emulator/attnc/simt_emulator.h: real barriers and warp
// shuffles). Each fixed kernel gets the attnc_kargs layout its comment
// documents and the launch shape codegen/ModelEmitterCuda.cpp (or, for
// find_nonfinite, runtime/train/CompiledStepCuda.cpp) gives it, on random
// inputs from fixed seeds, and is compared with a plain double-precision
// reference written here, within a bound relative to the magnitude of
// what is summed (e.g. 1e-5·Σ|terms|):
//
// - Sums over rows (column_sum_partial + column_sum_finish, and
//   layer_norm_param_grad_partial + finish): shapes with several column
//   tiles and row segments, ragged ones (C not a multiple of 32, R below
//   one segment), the two-output finish. Also bit for bit the documented
//   order (segments of kRowSegment rows in order, then segments in order),
//   the same bits on a second run, and nothing written past C or past
//   the partial sums.
// - heads: the split is the index formula exactly, the merge inverts it.
// - Cross-entropy (rows + mean): ignored rows (target −1), the exact count,
//   logits of ±100, one dominant logit of 100 in the last column, and
//   900..1000 (expf, and exp in double, overflow without the max), more
//   rows than the block's threads. Its gradient for a unit seed and a loss
//   scale of 65536, V not a multiple of the block, ignored rows all zero.
// - find_nonfinite: the smallest bad index wins whatever the block and
//   grid-stride order, ±Inf and NaNs are flagged, FLT_MAX is not, nothing
//   past n is read, an all-finite tensor leaves the slot at ~0.
// - accumulate.
// - The row helpers, through small kernels defined here: layerNormRow
//   (64 threads, C = 200) against a double layer norm; layerNormGradRow
//   against central finite differences, in double, of Σ dy·LN(x), a
//   reference that shares nothing with the kernel's formula;
//   blockSum/blockMax on 32, 96 and 1024 threads, every thread getting the
//   same bits, the scratch reused by consecutive reductions.
//
// - The embedding gradient (token_count, token_offsets, token_scatter,
//   embed_grad_table, embed_grad_positions, as the step launches them):
//   the sort's order checked, the sums bit for bit the in-order float sums
//   and within 1e-5 of double ones.
//
// Each test prints its worst error relative to its bound's scale.
//
//===----------------------------------------------------------------------===//
#include "attnc/simt_emulator.h"

#include "attnc/model_step.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

namespace step = attnc::step;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
/// Written one past each output; a kernel must leave it.
constexpr float kGuard = 1234.5f;

// codegen/ModelEmitterCuda.cpp's block widths.
constexpr int kColumnThreads = 128, kElementThreads = 256;
static_assert(kColumnThreads == step::kColumnTile, "stage 1: one thread per column of a tile");

/// ModelEmitter's threadsFor: a multiple of 32, between 32 and 256.
int threadsFor(long long width) {
  return int(std::clamp<long long>((width + 31) / 32 * 32, 32, 256));
}
long long blocksFor(long long count, int threads) { return (count + threads - 1) / threads; }
long long segmentsFor(long long R) { return (R + step::kRowSegment - 1) / step::kRowSegment; }
long long tilesFor(long long C) { return blocksFor(C, step::kColumnTile); }

using Kernel = void (*)(attnc_kargs);

/// `kernel` over `blocks` blocks of `threads` threads; false on a deadlock.
bool launch(Kernel kernel, long long blocks, int threads, const attnc_kargs &a) {
  return emu::launch(int(blocks), 1, threads, [&] { kernel(a); });
}

bool sameBits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
uint32_t bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

/// The largest |error| / scale seen, for the printout.
struct Worst {
  const char *what;
  double ratio = 0;
  explicit Worst(const char *w) : what(w) {}
  void see(double err, double scale) {
    if (!(err <= 0))
      ratio = std::max(ratio, scale > 0 ? err / scale : INFINITY);
  }
  void print() const { std::printf("worst %-40s %.3g\n", what, ratio); }
};

/// x[R, C]: columns of different offsets and scales (2^-3 .. 2^3).
std::vector<float> randomColumns(std::mt19937 &rng, long long R, long long C) {
  std::uniform_real_distribution<float> off(-2.0f, 2.0f), ex(-3.0f, 3.0f);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> offset(static_cast<size_t>(C)), scale(static_cast<size_t>(C)),
      x(static_cast<size_t>(R * C));
  for (long long c = 0; c < C; ++c)
    offset[size_t(c)] = off(rng), scale[size_t(c)] = std::exp2(ex(rng));
  for (long long r = 0; r < R; ++r)
    for (long long c = 0; c < C; ++c)
      x[size_t(r * C + c)] = offset[size_t(c)] + scale[size_t(c)] * nd(rng);
  return x;
}

//===----------------------------------------------------------------------===//
// Sums over rows
//===----------------------------------------------------------------------===//

struct Shape {
  long long R, C;
};
// 700 x 200: 2 tiles x 3 segments; 100 x 45: one ragged tile, R below one
// segment; 257 x 129: one column and one row past a tile and a segment;
// 512 x 256: exact multiples.
const Shape kRowSumShapes[] = {{700, 200}, {100, 45}, {257, 129}, {512, 256}};

/// Stage 1 as ModelEmitter launches it (tiles x segments blocks of 128),
/// into a NaN-filled buffer: a partial that no block wrote stays NaN (and
/// the guard past the end stays).
std::vector<float> columnSumPartial(const std::vector<float> &x, long long R, long long C) {
  const long long S = segmentsFor(R);
  std::vector<float> partial(size_t(S * C + 1), kNaN);
  partial.back() = kGuard;
  attnc_kargs a{};
  a.p[0] = x.data(), a.p[1] = partial.data();
  a.n[0] = R, a.n[1] = C;
  EXPECT_TRUE(launch(attnc_step_column_sum_partial, tilesFor(C) * S, kColumnThreads, a))
      << "deadlock";
  EXPECT_EQ(partial.back(), kGuard) << "written past the partial sums";
  partial.pop_back();
  return partial;
}

/// Stage 2 (tiles blocks of 128) over one partial buffer (flag 0) or two
/// (flag 1). Outputs start NaN with kGuard one past C.
struct Finished {
  std::vector<float> out, out2;
};
Finished columnSumFinish(const std::vector<float> &partial, const std::vector<float> *partial2,
                         long long S, long long C) {
  Finished f{std::vector<float>(size_t(C + 1), kNaN), std::vector<float>(size_t(C + 1), kNaN)};
  f.out[size_t(C)] = f.out2[size_t(C)] = kGuard;
  attnc_kargs a{};
  a.p[0] = partial.data(), a.p[1] = f.out.data();
  a.p[2] = partial2 ? partial2->data() : nullptr, a.p[3] = f.out2.data();
  a.n[0] = S, a.n[1] = C;
  a.flag = partial2 ? 1 : 0;
  EXPECT_TRUE(launch(attnc_step_column_sum_finish, tilesFor(C), kColumnThreads, a)) << "deadlock";
  return f;
}

/// Σ_r x[r, c] in float in the documented order: rows in order within each
/// segment of kRowSegment, then the segments' sums in order.
std::vector<float> orderedColumnSum(const std::vector<float> &x, long long R, long long C,
                                    std::vector<float> *partials) {
  const long long S = segmentsFor(R);
  std::vector<float> out(static_cast<size_t>(C));
  partials->assign(size_t(S * C), 0.0f);
  for (long long c = 0; c < C; ++c) {
    float total = 0;
    for (long long s = 0; s < S; ++s) {
      float p = 0;
      for (long long r = s * step::kRowSegment; r < std::min(R, (s + 1) * step::kRowSegment); ++r)
        p += x[size_t(r * C + c)];
      (*partials)[size_t(s * C + c)] = p;
      total += p;
    }
    out[size_t(c)] = total;
  }
  return out;
}

TEST(CudaModelStep, ColumnSumTwoStages) {
  std::mt19937 rng(11);
  Worst worst("column sum |err| / sum|x|");
  for (const Shape &sh : kRowSumShapes) {
    const long long R = sh.R, C = sh.C, S = segmentsFor(R);
    SCOPED_TRACE("R " + std::to_string(R) + ", C " + std::to_string(C));
    const std::vector<float> x = randomColumns(rng, R, C), x2 = randomColumns(rng, R, C);
    std::vector<double> ref(size_t(C), 0), absSum(size_t(C), 0), ref2(size_t(C), 0),
        absSum2(size_t(C), 0);
    for (long long r = 0; r < R; ++r)
      for (long long c = 0; c < C; ++c) {
        const size_t i = size_t(r * C + c);
        ref[size_t(c)] += x[i], absSum[size_t(c)] += std::fabs(x[i]);
        ref2[size_t(c)] += x2[i], absSum2[size_t(c)] += std::fabs(x2[i]);
      }
    std::vector<float> wantPartial;
    const std::vector<float> ordered = orderedColumnSum(x, R, C, &wantPartial);

    const std::vector<float> partial = columnSumPartial(x, R, C);
    const std::vector<float> partial2 = columnSumPartial(x2, R, C);
    // Every (segment, column) written, in the documented order.
    ASSERT_TRUE(sameBits(partial, wantPartial));

    const Finished one = columnSumFinish(partial, nullptr, S, C);
    const Finished two = columnSumFinish(partial, &partial2, S, C);
    for (long long c = 0; c < C; ++c) {
      const size_t i = size_t(c);
      const double err = std::fabs(one.out[i] - ref[i]), err2 = std::fabs(two.out2[i] - ref2[i]);
      worst.see(err, absSum[i]);
      worst.see(err2, absSum2[i]);
      ASSERT_LE(err, 1e-5 * absSum[i]) << "column " << c << ": " << one.out[i] << " vs " << ref[i];
      ASSERT_LE(err2, 1e-5 * absSum2[i])
          << "second output, column " << c << ": " << two.out2[i] << " vs " << ref2[i];
      ASSERT_EQ(bits(one.out[i]), bits(ordered[i])) << "column " << c << ": not in order";
      ASSERT_TRUE(std::isnan(one.out2[i])) << "flag 0 wrote the second output, column " << c;
    }
    EXPECT_EQ(one.out[size_t(C)], kGuard);
    EXPECT_EQ(two.out[size_t(C)], kGuard);
    EXPECT_EQ(two.out2[size_t(C)], kGuard);
    // The first output does not depend on the flag.
    EXPECT_TRUE(sameBits(one.out, two.out));
    // Run to run: the same bits.
    const Finished again = columnSumFinish(columnSumPartial(x, R, C), nullptr, S, C);
    EXPECT_TRUE(sameBits(one.out, again.out));
  }
  worst.print();
}

TEST(CudaModelStep, LayerNormParamGradTwoStages) {
  std::mt19937 rng(12);
  Worst wg("dgamma |err| / sum|dy|(|x|+|mean|)rstd"), wb("dbeta |err| / sum|dy|");
  for (const Shape &sh : kRowSumShapes) {
    const long long R = sh.R, C = sh.C, S = segmentsFor(R);
    SCOPED_TRACE("R " + std::to_string(R) + ", C " + std::to_string(C));
    // Rows of different offsets and spreads; their true mean and rstd.
    std::uniform_real_distribution<float> off(-3.0f, 3.0f), sd(0.2f, 3.0f);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(R * C)), mean(static_cast<size_t>(R)),
        rstd(static_cast<size_t>(R));
    for (long long r = 0; r < R; ++r) {
      const float o = off(rng), s = sd(rng);
      double m = 0, v = 0;
      for (long long c = 0; c < C; ++c)
        m += x[size_t(r * C + c)] = o + s * nd(rng);
      m /= double(C);
      for (long long c = 0; c < C; ++c)
        v += (x[size_t(r * C + c)] - m) * (x[size_t(r * C + c)] - m);
      mean[size_t(r)] = float(m), rstd[size_t(r)] = float(1.0 / std::sqrt(v / double(C) + 1e-5));
    }
    const std::vector<float> dy = randomColumns(rng, R, C);

    auto run = [&] {
      std::vector<float> partial(size_t(2 * S * C + 1), kNaN);
      partial.back() = kGuard;
      attnc_kargs a{};
      a.p[0] = dy.data(), a.p[1] = x.data(), a.p[2] = mean.data(), a.p[3] = rstd.data();
      a.p[4] = partial.data(), a.p[5] = partial.data() + S * C;
      a.n[0] = R, a.n[1] = C;
      EXPECT_TRUE(
          launch(attnc_step_layer_norm_param_grad_partial, tilesFor(C) * S, kColumnThreads, a));
      EXPECT_EQ(partial.back(), kGuard) << "written past the partial sums";
      const std::vector<float> pg(partial.begin(), partial.begin() + S * C),
          pb(partial.begin() + S * C, partial.end() - 1);
      return columnSumFinish(pg, &pb, S, C);
    };
    const Finished f = run();
    for (long long c = 0; c < C; ++c) {
      double g = 0, gScale = 0, b = 0, bScale = 0;
      for (long long r = 0; r < R; ++r) {
        const double d = dy[size_t(r * C + c)], xv = x[size_t(r * C + c)];
        g += d * (xv - mean[size_t(r)]) * rstd[size_t(r)];
        gScale += std::fabs(d) * (std::fabs(xv) + std::fabs(mean[size_t(r)])) * rstd[size_t(r)];
        b += d, bScale += std::fabs(d);
      }
      const double eg = std::fabs(f.out[size_t(c)] - g), eb = std::fabs(f.out2[size_t(c)] - b);
      wg.see(eg, gScale);
      wb.see(eb, bScale);
      ASSERT_LE(eg, 1e-5 * gScale) << "dgamma[" << c << "]: " << f.out[size_t(c)] << " vs " << g;
      ASSERT_LE(eb, 1e-5 * bScale) << "dbeta[" << c << "]: " << f.out2[size_t(c)] << " vs " << b;
    }
    EXPECT_EQ(f.out[size_t(C)], kGuard);
    EXPECT_EQ(f.out2[size_t(C)], kGuard);
    const Finished again = run();
    EXPECT_TRUE(sameBits(f.out, again.out));
    EXPECT_TRUE(sameBits(f.out2, again.out2));
  }
  wg.print();
  wb.print();
}

//===----------------------------------------------------------------------===//
// Head layout
//===----------------------------------------------------------------------===//

TEST(CudaModelStep, HeadsSplitIsTheIndexFormulaAndMergeInvertsIt) {
  struct Case {
    long long B, H, S, D;
  };
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Case &k : {Case{2, 3, 5, 4}, Case{2, 3, 7, 5}, Case{3, 4, 33, 8}})
    for (const int threads : {kElementThreads, 32}) {
      const long long B = k.B, H = k.H, S = k.S, D = k.D, n = B * H * S * D;
      SCOPED_TRACE("B H S D " + std::to_string(B) + " " + std::to_string(H) + " " +
                   std::to_string(S) + " " + std::to_string(D) + ", " + std::to_string(threads) +
                   " threads");
      std::vector<float> x(static_cast<size_t>(n)); // [B·S, H·D]
      for (float &v : x)
        v = nd(rng);
      std::vector<float> want(static_cast<size_t>(n)); // [B, H, S, D]
      for (long long b = 0; b < B; ++b)
        for (long long h = 0; h < H; ++h)
          for (long long s = 0; s < S; ++s)
            for (long long d = 0; d < D; ++d)
              want[size_t(((b * H + h) * S + s) * D + d)] =
                  x[size_t((b * S + s) * (H * D) + h * D + d)];
      auto run = [&](const std::vector<float> &in, int flag) {
        std::vector<float> out(size_t(n + 1), kNaN);
        out[size_t(n)] = kGuard;
        attnc_kargs a{};
        a.p[0] = in.data(), a.p[1] = out.data();
        a.n[0] = B, a.n[1] = H, a.n[2] = S, a.n[3] = D;
        a.flag = flag;
        EXPECT_TRUE(launch(attnc_step_heads, blocksFor(n, threads), threads, a));
        EXPECT_EQ(out[size_t(n)], kGuard);
        out.pop_back();
        return out;
      };
      const std::vector<float> split = run(x, 0);
      ASSERT_TRUE(sameBits(split, want)) << "split";
      EXPECT_TRUE(sameBits(run(split, 1), x)) << "merge";
    }
}

//===----------------------------------------------------------------------===//
// Cross-entropy
//===----------------------------------------------------------------------===//

/// Logits [R, V] and targets: normal(0, 3) logits, about one row in five
/// without a target (−1), and special rows first: ±100 with the target at
/// the smallest (row 0) or largest (row 1) logit, all equal to 100 (row
/// 2), 900..1000 (row 3), ±100 without a target (row 4), targets V−1 and
/// 0 (rows 5, 6), one dominant logit of 100 in the last column (row 7:
/// a block that misses it in its max overflows).
struct Logits {
  long long R, V;
  std::vector<float> l;
  std::vector<int> t;
};
Logits makeLogits(std::mt19937 &rng, long long R, long long V, bool someIgnored = true) {
  Logits g{R, V, std::vector<float>(size_t(R * V)), std::vector<int>(size_t(R))};
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::uniform_real_distribution<float> big(-100.0f, 100.0f), huge(900.0f, 1000.0f);
  std::uniform_int_distribution<int> target(0, int(V) - 1), fifth(0, 4);
  for (long long r = 0; r < R; ++r) {
    float *row = g.l.data() + r * V;
    int &t = g.t[size_t(r)];
    for (long long j = 0; j < V; ++j)
      row[j] = r == 0 || r == 1 || r == 4 ? big(rng)
               : r == 2                   ? 100.0f
               : r == 3                   ? huge(rng)
                                          : nd(rng);
    t = target(rng);
    if (r == 0)
      t = int(std::min_element(row, row + V) - row);
    if (r == 1)
      t = int(std::max_element(row, row + V) - row);
    if (r == 5)
      t = int(V) - 1;
    if (r == 6)
      t = 0;
    if (r == 7)
      row[V - 1] = 100.0f;
    if (someIgnored && (r == 4 || (r > 7 && fifth(rng) == 0)))
      t = -1;
  }
  return g;
}

/// log Σ_j exp(l_j) − l_t of one row in double, and the magnitude of its
/// parts (|max| + |log Σ exp(l − max)| + |l_t|).
double rowLoss(const float *l, long long V, int t, double *scale) {
  double mx = l[0];
  for (long long j = 1; j < V; ++j)
    mx = std::max(mx, double(l[j]));
  double s = 0;
  for (long long j = 0; j < V; ++j)
    s += std::exp(double(l[j]) - mx);
  *scale = std::fabs(mx) + std::log(s) + std::fabs(double(l[t]));
  return mx + std::log(s) - double(l[t]);
}

TEST(CudaModelStep, CrossEntropyLossAndCount) {
  std::mt19937 rng(14);
  Worst wr("row loss |err| / (|max| + lse + |l_t|)"), wm("mean loss |err| / mean");
  struct Case {
    long long R, V;
    bool someIgnored, allIgnored;
  };
  // 600 rows: 3 blocks in stage 1, and 2 or 3 rows per thread in stage 2.
  for (const Case &k : {Case{600, 37, true, false}, Case{40, 300, true, false},
                        Case{300, 5, false, false}, Case{50, 16, true, true}}) {
    const long long R = k.R, V = k.V;
    SCOPED_TRACE("R " + std::to_string(R) + ", V " + std::to_string(V));
    Logits g = makeLogits(rng, R, V, k.someIgnored);
    if (k.allIgnored)
      std::fill(g.t.begin(), g.t.end(), -1);
    std::vector<double> rows(size_t(R + 1), std::nan(""));
    rows[size_t(R)] = 4321.0;
    attnc_kargs a{};
    a.p[0] = g.l.data(), a.p[1] = g.t.data(), a.p[2] = rows.data();
    a.n[0] = R, a.n[1] = V;
    ASSERT_TRUE(
        launch(attnc_step_cross_entropy_rows, blocksFor(R, kElementThreads), kElementThreads, a));
    EXPECT_EQ(rows[size_t(R)], 4321.0);
    double sum = 0;
    long long count = 0;
    for (long long r = 0; r < R; ++r) {
      const int t = g.t[size_t(r)];
      if (t < 0) {
        ASSERT_EQ(rows[size_t(r)], -1.0) << "row " << r << " has no target";
        continue;
      }
      double scale;
      const double want = rowLoss(g.l.data() + r * V, V, t, &scale);
      const double err = std::fabs(rows[size_t(r)] - want);
      wr.see(err, scale);
      ASSERT_LE(err, 1e-6 * scale) << "row " << r << ": " << rows[size_t(r)] << " vs " << want;
      sum += want, ++count;
    }
    EXPECT_EQ(count == 0, k.allIgnored);

    float loss[2] = {kNaN, kGuard}, cnt[2] = {kNaN, kGuard};
    attnc_kargs b{};
    b.p[0] = rows.data(), b.p[1] = loss, b.p[2] = cnt;
    b.n[0] = R;
    ASSERT_TRUE(launch(attnc_step_cross_entropy, 1, kElementThreads, b));
    EXPECT_EQ(cnt[0], float(count));
    const double mean = count ? sum / double(count) : 0.0; // row losses are ≥ 0
    const double err = std::fabs(loss[0] - mean);
    wm.see(err, mean);
    EXPECT_LE(err, 1e-6 * mean) << loss[0] << " vs " << mean;
    if (count > 0) {
      EXPECT_GT(loss[0], 0.0f);
    }
    EXPECT_EQ(loss[1], kGuard);
    EXPECT_EQ(cnt[1], kGuard);
  }
  wr.print();
  wm.print();
}

TEST(CudaModelStep, CrossEntropyGradient) {
  std::mt19937 rng(15);
  Worst worst("dlogits |err| / (f0/count)(p + onehot), p > 1e-30");
  struct Case {
    long long R, V;
    int threads;
  };
  // V = 300: ModelEmitter's 256 threads (some take two columns) and 32
  // (ten each); V = 37: 64 threads, some with none.
  for (const Case &k :
       {Case{12, 300, threadsFor(300)}, Case{12, 300, 32}, Case{12, 37, threadsFor(37)}})
    for (const float f0 : {1.0f, 65536.0f}) {
      const long long R = k.R, V = k.V;
      SCOPED_TRACE("V " + std::to_string(V) + ", " + std::to_string(k.threads) + " threads, f0 " +
                   std::to_string(f0));
      const Logits g = makeLogits(rng, R, V);
      const float count =
          float(std::count_if(g.t.begin(), g.t.end(), [](int t) { return t >= 0; }));
      ASSERT_GT(count, 0.0f);
      ASSERT_LT(count, float(R)); // some rows without a target
      std::vector<float> d(size_t(R * V + 1), kNaN);
      d[size_t(R * V)] = kGuard;
      attnc_kargs a{};
      a.p[0] = g.l.data(), a.p[1] = g.t.data(), a.p[2] = &count, a.p[3] = d.data();
      a.n[0] = R, a.n[1] = V;
      a.f[0] = f0;
      ASSERT_TRUE(launch(attnc_step_cross_entropy_grad, R, k.threads, a));
      EXPECT_EQ(d[size_t(R * V)], kGuard);
      const double scale = double(f0) / double(count);
      for (long long r = 0; r < R; ++r) {
        const float *l = g.l.data() + r * V;
        const int t = g.t[size_t(r)];
        double mx = l[0], s = 0;
        for (long long j = 0; j < V; ++j)
          mx = std::max(mx, double(l[j]));
        for (long long j = 0; j < V; ++j)
          s += std::exp(double(l[j]) - mx);
        for (long long j = 0; j < V; ++j) {
          const float got = d[size_t(r * V + j)];
          if (t < 0) {
            ASSERT_EQ(bits(got), 0u) << "row " << r << " has no target, column " << j;
            continue;
          }
          const double p = std::exp(double(l[j]) - mx) / s, onehot = j == t ? 1.0 : 0.0;
          const double want = (p - onehot) * scale, mag = scale * (p + onehot);
          const double err = std::fabs(got - want);
          if (p > 1e-30) // below: float's range ends, they come out 0
            worst.see(err, mag);
          ASSERT_LE(err, 1e-5 * mag + 1e-30 * scale)
              << "row " << r << ", column " << j << ": " << got << " vs " << want;
        }
      }
    }
  worst.print();
}

//===----------------------------------------------------------------------===//
// Non-finite check, accumulate
//===----------------------------------------------------------------------===//

/// The slot after find_nonfinite over x[0, n) on `blocks` blocks of 256
/// (the runtime: min(⌈n/256⌉, 4096)); the slot starts at `initial`.
unsigned long long findNonfinite(const std::vector<float> &x, long long n, long long blocks,
                                 unsigned long long initial = ~0ull) {
  unsigned long long slot[2] = {initial, 77};
  attnc_kargs a{};
  a.p[0] = x.data(), a.p[1] = slot;
  a.n[0] = n;
  EXPECT_TRUE(launch(attnc_step_find_nonfinite, blocks, 256, a));
  EXPECT_EQ(slot[1], 77u);
  return slot[0];
}

float floatOfBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

TEST(CudaModelStep, FindNonfiniteGivesTheSmallestBadIndex) {
  const long long n = 5000;
  std::mt19937 rng(16);
  std::normal_distribution<float> nd(0.0f, 100.0f);
  // One past n: an Inf the kernel must not read as part of x.
  std::vector<float> clean(size_t(n + 1));
  for (float &v : clean)
    v = nd(rng);
  clean[size_t(n)] = kInf;
  // Large and odd finite values: not flagged.
  clean[3] = FLT_MAX, clean[4] = -FLT_MAX, clean[5] = FLT_MIN / 4, clean[6] = -0.0f;
  clean[7] = floatOfBits(0x7f7fffffu), clean[8] = 1e38f, clean[n - 1] = -FLT_MAX;
  const long long runtimeBlocks = std::min<long long>((n + 255) / 256, 4096); // 20
  const long long grids[] = {runtimeBlocks, 1, 2, 3, 7};
  for (const long long grid : grids)
    EXPECT_EQ(findNonfinite(clean, n, grid), ~0ull) << grid << " blocks";

  // ±Inf, quiet NaNs of either sign, a signalling NaN, an all-ones NaN.
  const float bad[] = {
      kInf, -kInf, kNaN, -kNaN, floatOfBits(0x7f800001u), floatOfBits(0xffffffffu)};
  // Sets of bad indices. With 2 blocks (a grid stride of 512): 520 is block
  // 0's and 300 block 1's (a later index in an earlier block); 100 is block
  // 0's and 300 block 1's (an earlier index in an earlier block); 261 and
  // 773 are one thread's with 1 block.
  const std::vector<std::vector<long long>> sets = {
      {0}, {n - 1}, {520, 300}, {100, 300}, {773, 261}, {4999, 4000, 1200, 2500}, {4096, 257}};
  int kind = 0;
  for (const std::vector<long long> &set : sets)
    for (const long long grid : grids) {
      std::vector<float> x = clean;
      for (const long long i : set)
        x[size_t(i)] = bad[size_t(kind++ % std::size(bad))];
      const long long want = *std::min_element(set.begin(), set.end());
      EXPECT_EQ(findNonfinite(x, n, grid), (unsigned long long)want)
          << "bad at " << testing::PrintToString(set) << ", " << grid << " blocks";
    }
  // Each kind alone.
  for (const float b : bad) {
    std::vector<float> x = clean;
    x[2345] = b;
    EXPECT_EQ(findNonfinite(x, n, runtimeBlocks), 2345ull) << "bits " << std::hex << bits(b);
  }
  // The slot is a minimum: a smaller index already there stays.
  std::vector<float> x = clean;
  x[100] = kNaN;
  EXPECT_EQ(findNonfinite(x, n, runtimeBlocks, 7), 7ull);
  EXPECT_EQ(findNonfinite(x, n, runtimeBlocks, 101), 100ull);
}

TEST(CudaModelStep, Accumulate) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 10.0f);
  for (const long long n : {1000LL, 1LL, 256LL, 257LL}) {
    SCOPED_TRACE("n " + std::to_string(n));
    std::vector<float> y(size_t(n + 1)), x(size_t(n + 1));
    for (long long i = 0; i < n; ++i)
      y[size_t(i)] = nd(rng), x[size_t(i)] = nd(rng);
    y[size_t(n)] = kGuard, x[size_t(n)] = 1.0f;
    const std::vector<float> y0 = y;
    attnc_kargs a{};
    a.p[0] = y.data(), a.p[1] = x.data();
    a.n[0] = n;
    ASSERT_TRUE(launch(attnc_step_accumulate, blocksFor(n, 256), 256, a));
    for (long long i = 0; i < n; ++i) {
      const size_t k = size_t(i);
      // One float add: the correctly rounded sum.
      ASSERT_EQ(bits(y[k]), bits(float(double(y0[k]) + double(x[k])))) << i;
    }
    EXPECT_EQ(y[size_t(n)], kGuard);
  }
}

/// The embedding gradient as the emitted step runs it: a stable counting
/// sort of the rows by token in one int scratch (counts, offsets, order),
/// then the table and position sums. Returns dtable [V, C] and dpos [S, C]
/// (each with a guard element after it).
void embedGrad(const std::vector<int> &tokens, const std::vector<float> &dy, long long V,
               long long S, long long C, std::vector<float> &dtable, std::vector<float> &dpos) {
  const long long R = (long long)tokens.size(), segs = segmentsFor(R);
  std::vector<int> scratch(size_t(V * segs + V + 1 + R), -7); // garbage but the counts
  std::fill(scratch.begin(), scratch.begin() + V * segs, 0);
  int *counts = scratch.data(), *offsets = counts + V * segs, *order = offsets + V + 1;
  dtable.assign(size_t(V * C + 1), kNaN), dpos.assign(size_t(S * C + 1), kNaN);
  dtable.back() = kGuard, dpos.back() = kGuard;
  attnc_kargs a{};
  a.p[0] = tokens.data(), a.p[1] = counts, a.n[0] = R, a.n[1] = V;
  ASSERT_TRUE(launch(attnc_step_token_count, segs, 256, a));
  a = {};
  a.p[0] = counts, a.p[1] = offsets, a.n[0] = R, a.n[1] = V;
  ASSERT_TRUE(launch(attnc_step_token_offsets, 1, 256, a));
  a = {};
  a.p[0] = tokens.data(), a.p[1] = counts, a.p[2] = order, a.n[0] = R;
  ASSERT_TRUE(launch(attnc_step_token_scatter, blocksFor(segs, kColumnThreads), kColumnThreads, a));
  // The order: every row once, grouped by token, increasing within one.
  for (long long v = 0; v < V; ++v)
    for (int k = offsets[v]; k < offsets[v + 1]; ++k) {
      ASSERT_EQ(tokens[size_t(order[k])], v) << "place " << k;
      if (k > offsets[v]) {
        ASSERT_LT(order[k - 1], order[k]) << "token " << v << " out of order";
      }
    }
  ASSERT_EQ(offsets[0], 0);
  ASSERT_EQ(offsets[V], R);
  a = {};
  a.p[0] = dy.data(), a.p[1] = offsets, a.p[2] = order, a.p[3] = dtable.data();
  a.n[0] = V, a.n[1] = C;
  ASSERT_TRUE(launch(attnc_step_embed_grad_table, tilesFor(C) * V, kColumnThreads, a));
  a = {};
  a.p[0] = dy.data(), a.p[1] = dpos.data(), a.n[0] = R, a.n[1] = S, a.n[2] = C;
  ASSERT_TRUE(launch(attnc_step_embed_grad_positions, blocksFor(S * C, kElementThreads),
                     kElementThreads, a));
}

// dtable[v] = Σ dy[r] over rows with token v, dpos[s] = Σ dy[r] over rows
// r ≡ s (mod S): against double sums, and bit for bit against float sums
// over the rows in increasing order (the CPU step's order). Tokens: a few
// frequent, some never seen (their rows are zero), more tokens than the
// offsets kernel has threads, several row segments and column tiles.
TEST(CudaModelStep, EmbedGradSortsRowsByTokenAndSumsInOrder) {
  Worst worst("embed grad vs double (of sum |dy|)");
  std::mt19937 rng(23);
  struct Shape {
    long long B, S, V, C;
  };
  for (const Shape sh : {Shape{7, 100, 37, 200}, Shape{3, 90, 300, 40}, Shape{1, 16, 5, 129}}) {
    const long long R = sh.B * sh.S, V = sh.V, S = sh.S, C = sh.C;
    SCOPED_TRACE("R " + std::to_string(R) + " V " + std::to_string(V) + " C " + std::to_string(C));
    std::vector<int> tokens(static_cast<size_t>(R));
    std::uniform_int_distribution<int> any(0, int(V) - 1), few(0, 2);
    for (int &t : tokens) // half the rows on three tokens; the last token never
      t = rng() % 2 ? few(rng) : std::min(any(rng), int(V) - 2);
    const std::vector<float> dy = randomColumns(rng, R, C);
    std::vector<float> dtable, dpos;
    embedGrad(tokens, dy, V, S, C, dtable, dpos);
    if (HasFatalFailure())
      return;
    EXPECT_EQ(dtable.back(), kGuard);
    EXPECT_EQ(dpos.back(), kGuard);
    // Row `k` of `out` against the rows r of dy with inRow(k, r), in
    // increasing r: bit for bit a float sum in that order, and within
    // 1e-5 of a double one.
    auto check = [&](const char *what, const std::vector<float> &out, long long rows, auto inRow) {
      for (long long k = 0; k < rows; ++k)
        for (long long c = 0; c < C; ++c) {
          float inOrder = 0;
          double ref = 0, mag = 0;
          for (long long r = 0; r < R; ++r)
            if (inRow(k, r)) {
              const float g = dy[size_t(r * C + c)];
              inOrder += g, ref += g, mag += std::fabs(g);
            }
          const float got = out[size_t(k * C + c)];
          ASSERT_EQ(bits(got), bits(inOrder)) << what << "[" << k << ", " << c << "]";
          EXPECT_LE(std::fabs(got - ref), 1e-5 * mag + 1e-30);
          worst.see(std::fabs(got - ref), mag);
        }
    };
    check("dtable", dtable, V, [&](long long v, long long r) { return tokens[size_t(r)] == v; });
    check("dpos", dpos, S, [&](long long s, long long r) { return r % S == s; });
    if (HasFatalFailure())
      return;
    EXPECT_EQ(dtable[size_t((V - 1) * C)], 0.0f) << "a token never seen gets zeros";
  }
  worst.print();
}

//===----------------------------------------------------------------------===//
// The row helpers, through kernels of this test
//===----------------------------------------------------------------------===//

/// One block per row of x[R, C]: layerNormRow. p: x, gamma, beta, y, mean,
/// rstd; n: R, C; f[0]: eps.
__global__ void test_layer_norm_rows(attnc_kargs a) {
  struct Shared {
    float red[step::kMaxWarps];
  };
  ATTNC_STEP_SHARED(Shared, sm);
  const long long r = blockIdx.x, C = a.n[1];
  step::layerNormRow((const float *)a.p[0] + r * C, (const float *)a.p[1], (const float *)a.p[2],
                     (float *)a.p[3] + r * C, (float *)a.p[4] + r, (float *)a.p[5] + r, int(C),
                     a.f[0], sm.red);
}

/// One block per row: layerNormGradRow. p: dy, x, gamma, mean, rstd, dx;
/// n: R, C.
__global__ void test_layer_norm_grad_rows(attnc_kargs a) {
  struct Shared {
    float red[step::kMaxWarps];
  };
  ATTNC_STEP_SHARED(Shared, sm);
  const long long r = blockIdx.x, C = a.n[1];
  step::layerNormGradRow((const float *)a.p[0] + r * C, (const float *)a.p[1] + r * C,
                         (const float *)a.p[2], ((const float *)a.p[3])[r],
                         ((const float *)a.p[4])[r], (float *)a.p[5] + r * C, int(C), sm.red);
}

/// Thread t of one block: out[0][t] = blockSum(v[t]), out[1][t] =
/// blockMax(v[t]), out[2][t] = blockSum(v[t]²) (the scratch reused at
/// once), dout[t] = blockSum<double>(v[t]). p: v, out, dout.
__global__ void test_block_reductions(attnc_kargs a) {
  struct Shared {
    float red[step::kMaxWarps];
    double dred[step::kMaxWarps];
  };
  ATTNC_STEP_SHARED(Shared, sm);
  const int t = int(threadIdx.x), n = int(blockDim.x);
  const float v = ((const float *)a.p[0])[t];
  float *out = (float *)a.p[1];
  out[t] = step::blockSum(v, sm.red);
  out[n + t] = step::blockMax(v, sm.red);
  out[2 * n + t] = step::blockSum(v * v, sm.red);
  ((double *)a.p[2])[t] = step::blockSum(double(v), sm.dred);
}

/// A row's layer norm in double, two passes.
struct RowStats {
  double mean, rstd;
};
RowStats layerNormStats(const double *x, long long C, double eps) {
  double m = 0, v = 0;
  for (long long c = 0; c < C; ++c)
    m += x[c];
  m /= double(C);
  for (long long c = 0; c < C; ++c)
    v += (x[c] - m) * (x[c] - m);
  return {m, 1.0 / std::sqrt(v / double(C) + eps)};
}

/// The layer-norm rows of the helper tests: (offset, spread) per row. Row
/// 4's spread is below sqrt(eps), so eps matters; row 3 sits far from 0.
const float kRowOffset[] = {0.0f, 3.0f, -2.0f, 50.0f, 1.0f},
            kRowSpread[] = {1.0f, 2.0f, 0.5f, 1.0f, 1e-3f};
constexpr long long kLnRows = 5, kLnC = 200;
constexpr int kLnThreads = 64;
constexpr float kLnEps = 1e-5f;

struct LnInputs {
  std::vector<float> x, gamma, beta, dy;
};
LnInputs lnInputs() {
  std::mt19937 rng(18);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> g(0.5f, 1.5f);
  LnInputs in{std::vector<float>(size_t(kLnRows * kLnC)), std::vector<float>(size_t(kLnC)),
              std::vector<float>(size_t(kLnC)), std::vector<float>(size_t(kLnRows * kLnC))};
  for (long long r = 0; r < kLnRows; ++r)
    for (long long c = 0; c < kLnC; ++c)
      in.x[size_t(r * kLnC + c)] = kRowOffset[r] + kRowSpread[r] * nd(rng);
  for (long long c = 0; c < kLnC; ++c)
    in.gamma[size_t(c)] = (c % 3 ? 1.0f : -1.0f) * g(rng), in.beta[size_t(c)] = nd(rng);
  for (float &v : in.dy)
    v = nd(rng);
  return in;
}

/// The forward on the emulator: y, mean, rstd (each with a guard past it).
struct LnOutputs {
  std::vector<float> y, mean, rstd;
};
LnOutputs layerNormForward(const LnInputs &in) {
  LnOutputs o{std::vector<float>(size_t(kLnRows * kLnC + 1), kNaN),
              std::vector<float>(size_t(kLnRows + 1), kNaN),
              std::vector<float>(size_t(kLnRows + 1), kNaN)};
  o.y.back() = o.mean.back() = o.rstd.back() = kGuard;
  attnc_kargs a{};
  a.p[0] = in.x.data(), a.p[1] = in.gamma.data(), a.p[2] = in.beta.data();
  a.p[3] = o.y.data(), a.p[4] = o.mean.data(), a.p[5] = o.rstd.data();
  a.n[0] = kLnRows, a.n[1] = kLnC;
  a.f[0] = kLnEps;
  EXPECT_TRUE(launch(test_layer_norm_rows, kLnRows, kLnThreads, a));
  EXPECT_EQ(o.y.back(), kGuard);
  EXPECT_EQ(o.mean.back(), kGuard);
  EXPECT_EQ(o.rstd.back(), kGuard);
  return o;
}

TEST(CudaModelStep, LayerNormRowMatchesDouble) {
  static_assert(kLnC % kLnThreads != 0, "a ragged last stride");
  const LnInputs in = lnInputs();
  const LnOutputs o = layerNormForward(in);
  Worst wm("LN mean |err| / mean|x|"), wr("LN rstd |err| / rstd"),
      wy("LN y |err| / (|g|rstd(|x|+|mean|)+|b|)");
  for (long long r = 0; r < kLnRows; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    const std::vector<double> x(in.x.begin() + r * kLnC, in.x.begin() + (r + 1) * kLnC);
    const RowStats st = layerNormStats(x.data(), kLnC, double(kLnEps));
    double meanAbs = 0;
    for (double v : x)
      meanAbs += std::fabs(v) / double(kLnC);
    const double em = std::fabs(o.mean[size_t(r)] - st.mean),
                 er = std::fabs(o.rstd[size_t(r)] - st.rstd);
    wm.see(em, meanAbs);
    wr.see(er, st.rstd);
    EXPECT_LE(em, 1e-5 * meanAbs) << o.mean[size_t(r)] << " vs " << st.mean;
    EXPECT_LE(er, 1e-5 * st.rstd) << o.rstd[size_t(r)] << " vs " << st.rstd;
    for (long long c = 0; c < kLnC; ++c) {
      const double g = in.gamma[size_t(c)], b = in.beta[size_t(c)];
      const double want = (x[size_t(c)] - st.mean) * st.rstd * g + b;
      const double mag =
          std::fabs(g) * st.rstd * (std::fabs(x[size_t(c)]) + std::fabs(st.mean)) + std::fabs(b);
      const double err = std::fabs(o.y[size_t(r * kLnC + c)] - want);
      wy.see(err, mag);
      ASSERT_LE(err, 1e-5 * mag) << "column " << c << ": " << o.y[size_t(r * kLnC + c)] << " vs "
                                 << want;
    }
  }
  wm.print();
  wr.print();
  wy.print();
}

TEST(CudaModelStep, LayerNormGradRowMatchesFiniteDifferences) {
  const LnInputs in = lnInputs();
  const LnOutputs fwd = layerNormForward(in);
  std::vector<float> dx(size_t(kLnRows * kLnC + 1), kNaN);
  dx.back() = kGuard;
  attnc_kargs a{};
  a.p[0] = in.dy.data(), a.p[1] = in.x.data(), a.p[2] = in.gamma.data();
  a.p[3] = fwd.mean.data(), a.p[4] = fwd.rstd.data(), a.p[5] = dx.data();
  a.n[0] = kLnRows, a.n[1] = kLnC;
  ASSERT_TRUE(launch(test_layer_norm_grad_rows, kLnRows, kLnThreads, a));
  EXPECT_EQ(dx.back(), kGuard);
  Worst worst("LN dx |err| / rstd(|g dy| + <|g dy|> + a<|g dy| a>)");
  for (long long r = 0; r < kLnRows; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    std::vector<double> x(in.x.begin() + r * kLnC, in.x.begin() + (r + 1) * kLnC);
    const float *dy = in.dy.data() + r * kLnC;
    // L(x) = Σ dy·LN(x), everything in double.
    auto loss = [&](const std::vector<double> &xs) {
      const RowStats st = layerNormStats(xs.data(), kLnC, double(kLnEps));
      double L = 0;
      for (long long c = 0; c < kLnC; ++c)
        L += double(dy[c]) *
             ((xs[size_t(c)] - st.mean) * st.rstd * in.gamma[size_t(c)] + in.beta[size_t(c)]);
      return L;
    };
    const RowStats st = layerNormStats(x.data(), kLnC, double(kLnEps));
    // The size of the terms dx is made of: a_c = rstd(|x_c| + |mean|)
    // bounds |x̂_c| and its rounding.
    double mg = 0, mgx = 0;
    for (long long c = 0; c < kLnC; ++c) {
      const double g = std::fabs(double(dy[c]) * in.gamma[size_t(c)]);
      mg += g / double(kLnC);
      mgx += g * st.rstd * (std::fabs(x[size_t(c)]) + std::fabs(st.mean)) / double(kLnC);
    }
    const double h = 1e-5 / st.rstd; // a step of 1e-5 normalised units
    for (long long c = 0; c < kLnC; ++c) {
      const double x0 = x[size_t(c)];
      x[size_t(c)] = x0 + h;
      const double up = loss(x);
      x[size_t(c)] = x0 - h;
      const double down = loss(x);
      x[size_t(c)] = x0;
      const double want = (up - down) / (2 * h);
      const double mag = st.rstd * (std::fabs(double(dy[c]) * in.gamma[size_t(c)]) + mg +
                                    st.rstd * (std::fabs(x0) + std::fabs(st.mean)) * mgx);
      const double err = std::fabs(dx[size_t(r * kLnC + c)] - want);
      worst.see(err, mag);
      ASSERT_LE(err, 1e-5 * mag) << "column " << c << ": " << dx[size_t(r * kLnC + c)] << " vs "
                                 << want;
    }
  }
  worst.print();
}

TEST(CudaModelStep, BlockSumAndMax) {
  std::mt19937 rng(19);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-6, 6);
  Worst ws("blockSum |err| / sum|v|"), wd("blockSum<double> |err| / sum|v|");
  for (const int threads : {32, 96, 1024}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    std::vector<float> v(static_cast<size_t>(threads));
    for (float &x : v)
      x = nd(rng) * std::exp2(float(ex(rng)));
    // The maximum: in the last lane (32), all negative with the largest
    // mid-block (96), in the last thread (1024).
    if (threads == 96) {
      for (float &x : v)
        x = -std::fabs(x) - 1.0f;
      v[40] = -0.5f;
    } else {
      v[size_t(threads - 1)] = 1000.0f;
    }
    std::vector<float> out(size_t(3 * threads), kNaN);
    std::vector<double> dout(size_t(threads), std::nan(""));
    attnc_kargs a{};
    a.p[0] = v.data(), a.p[1] = out.data(), a.p[2] = dout.data();
    ASSERT_TRUE(launch(test_block_reductions, 1, threads, a));
    double sum = 0, abs = 0, sq = 0;
    for (const float x : v)
      sum += x, abs += std::fabs(x), sq += double(x * x);
    const float mx = *std::max_element(v.begin(), v.end());
    for (int t = 0; t < threads; ++t) {
      // The same bits in every thread.
      ASSERT_EQ(bits(out[size_t(t)]), bits(out[0])) << "thread " << t;
      ASSERT_EQ(bits(out[size_t(threads + t)]), bits(out[size_t(threads)])) << "thread " << t;
      ASSERT_EQ(bits(out[size_t(2 * threads + t)]), bits(out[size_t(2 * threads)]))
          << "thread " << t;
      ASSERT_EQ(dout[size_t(t)], dout[0]) << "thread " << t;
    }
    const double es = std::fabs(out[0] - sum), e2 = std::fabs(out[size_t(2 * threads)] - sq),
                 ed = std::fabs(dout[0] - sum);
    ws.see(es, abs);
    ws.see(e2, sq);
    wd.see(ed, abs);
    EXPECT_LE(es, 1e-6 * abs) << out[0] << " vs " << sum;
    EXPECT_EQ(out[size_t(threads)], mx);
    EXPECT_LE(e2, 1e-6 * sq) << out[size_t(2 * threads)] << " vs " << sq;
    EXPECT_LE(ed, 1e-14 * abs) << dout[0] << " vs " << sum;
  }
  ws.print();
  wd.print();
}

} // namespace
