//===- BenchLsh.cpp - attnc bench: the LSH columns and sweep --------------===//
//
// LSH (Reformer) kernels for `attnc bench`: compiled once per rounds x chunk
// (they are generic in B, H and N), and the Reformer paper's fixed-tokens
// sweep: with B·N held constant, dense attention's time per token grows with
// N while LSH's should stay flat (its cost per query is rounds x a window of
// (before + 1) chunks, independent of N). FLOP convention for LSH forward:
// 4·B·H·N·D·(before + after + 1)·chunk·rounds (scores and P·V of every
// query against its window), hashing not counted.
//
//===----------------------------------------------------------------------===//
#include "driver/bench/BenchLsh.h"
#include "driver/Report.h"
#include "driver/bench/BenchCommon.h"
#include "driver/Compile.h"
#include "driver/Run.h"

#include "dialect/AttnDialect.h"
#include "runtime/PhiloxDraws.h"

#include "mlir/IR/Builders.h"

#include <fstream>
#include <ostream>
#include <unistd.h>

using namespace mlir;

namespace attnc::driver {

using namespace bench;

namespace {

/// The LSH variant of the benchmark: non-causal, one chunk back, never the
/// dense fallback (the point is to time the LSH kernels).
attn::VariantOp lshVariant(OpBuilder &b, const BenchOptions &opt, int rounds, int chunk) {
  MLIRContext *ctx = b.getContext();
  auto lsh = attn::LshAttr::get(ctx, opt.lshBuckets, rounds, chunk, /*before=*/1, /*after=*/0,
                                /*seed=*/0, /*dense_fallback=*/false);
  return b.create<attn::VariantOp>(b.getUnknownLoc(),
                                   "lsh_r" + std::to_string(rounds) + "_c" + std::to_string(chunk),
                                   nullptr, lsh, /*shared_qk=*/true, false, false, nullptr, nullptr,
                                   nullptr, attn::TileAttr::getAuto(ctx));
}

} // namespace

mlir::LogicalResult compileLshBenchKernels(ModuleOp module, const BenchOptions &opt, int maxSeq,
                                           bool backward, std::vector<LshBenchKernel> &out) {
  OpBuilder b(module.getBody(), module.getBody()->end());
  for (int chunk : opt.lshChunks)
    for (int rounds : opt.lshRounds) {
      LshBenchKernel k;
      k.rounds = rounds, k.chunk = chunk;
      codegen::AttentionShape shape;
      shape.heads = opt.heads, shape.seq = maxSeq, shape.headDim = opt.headDim;
      shape.elementType = b.getF32Type();
      shape.differentiate = backward;
      if (mlir::failed(
              compileCpuAttention(module, lshVariant(b, opt, rounds, chunk), shape, k.kernels)))
        return mlir::failure();
      std::vector<float> r(size_t(rounds) * opt.headDim * (opt.lshBuckets / 2));
      philox::lshRotations(0, 0, r);
      k.rotations = st::Tensor::f32({rounds, opt.headDim, opt.lshBuckets / 2}, r);
      out.push_back(std::move(k));
    }
  return mlir::success();
}

mlir::LogicalResult runLshSweep(ModuleOp module, const BenchOptions &opt) {
  const int T = opt.sweepTokens, H = opt.heads, D = opt.headDim;
  std::vector<int> lengths;
  for (int n : opt.sweepLengths)
    if (n <= T && T % n == 0)
      lengths.push_back(n);
  if (lengths.size() < 2) {
    diagnostics() << "attnc bench: error: the LSH sweep needs at least two lengths dividing " << T
                  << " tokens\n";
    return mlir::failure();
  }
  const int chunk = opt.lshChunks.front();
  BenchOptions one = opt;
  one.lshChunks = {chunk};
  std::vector<LshBenchKernel> lsh;
  if (mlir::failed(compileLshBenchKernels(module, one, lengths.back(), false, lsh)))
    return mlir::failure();
  OpBuilder b(module.getBody(), module.getBody()->end());
  auto dense = b.create<attn::VariantOp>(b.getUnknownLoc(), "sweep_dense", nullptr, nullptr, false,
                                         false, false, nullptr, nullptr, nullptr,
                                         attn::TileAttr::getAuto(b.getContext()));
  codegen::AttentionShape shape;
  shape.heads = H, shape.headDim = D, shape.elementType = b.getF32Type();
  std::optional<CpuAttention> denseKernels;
  if (mlir::failed(compileCpuAttention(module, dense, shape, denseKernels)))
    return mlir::failure();

  bool tty = isatty(STDERR_FILENO);
  std::mt19937 rng(99);
  // ms[0] = dense, ms[1 + i] = lsh[i]; one row per N.
  std::vector<std::vector<double>> ms;
  for (int N : lengths) {
    int B = T / N;
    st::Tensor q = randomTensor({B, H, N, D}, rng, 1.f), v = randomTensor({B, H, N, D}, rng, 1.f);
    AttentionInputs in;
    in.q = &q, in.k = &q, in.v = &v;
    std::vector<double> row;
    if (tty)
      diagnostics() << "\r  sweep N=" << N << " B=" << B << ": dense        " << std::flush;
    if (Expected<AttentionOutputs> r = denseKernels->run(in); !r) {
      diagnostics() << "attnc bench: error: " << r.error() << "\n";
      return mlir::failure();
    }
    row.push_back(medianMs(opt.repeats, [&] { (void)denseKernels->run(in); }));
    for (LshBenchKernel &k : lsh) {
      if (tty)
        diagnostics() << "\r  sweep N=" << N << " B=" << B << ": " << k.label() << "      "
                      << std::flush;
      AttentionInputs li = in;
      li.rotations = &k.rotations;
      if (Expected<AttentionOutputs> r = k.kernels->run(li); !r) {
        diagnostics() << "attnc bench: error: " << r.error() << "\n";
        return mlir::failure();
      }
      row.push_back(medianMs(opt.repeats, [&] { (void)k.kernels->run(li); }));
    }
    ms.push_back(row);
  }
  if (tty)
    diagnostics() << "\r" << std::string(60, ' ') << "\r";

  auto usPerToken = [&](double t) { return t * 1e3 / T; };
  results() << "\nLSH sweep (Reformer fig.): B*N = " << T << " tokens, H=" << H << " D=" << D
            << ", chunk " << chunk << ", " << opt.lshBuckets
            << " buckets; forward time per token (us)\n"
            << std::setw(8) << "N" << std::setw(6) << "B" << std::setw(10) << "dense";
  for (const LshBenchKernel &k : lsh)
    results() << std::setw(10) << ("r=" + std::to_string(k.rounds));
  results() << "\n";
  for (size_t i = 0; i < lengths.size(); ++i) {
    results() << std::setw(8) << lengths[i] << std::setw(6) << T / lengths[i];
    for (double t : ms[i])
      results() << std::setw(10) << fmt(usPerToken(t), 3);
    results() << "\n";
  }
  results() << std::setw(14)
            << ("N=" + std::to_string(lengths.back()) + " / N=" + std::to_string(lengths.front()));
  for (size_t c = 0; c < ms.front().size(); ++c)
    results() << std::setw(9) << fmt(ms.back()[c] / ms.front()[c]) << "x";
  results() << "   (per-token time ratio: flat = 1x)\n";

  std::ofstream csv(opt.sweepCsv);
  csv << "tokens,n,b,kernel,ms,us_per_token\n";
  for (size_t i = 0; i < lengths.size(); ++i)
    for (size_t c = 0; c < ms[i].size(); ++c)
      csv << T << "," << lengths[i] << "," << T / lengths[i] << ","
          << (c == 0 ? std::string("dense") : lsh[c - 1].label()) << "," << ms[i][c] << ","
          << usPerToken(ms[i][c]) << "\n";

  // Time per token against N (log x), one line per kernel.
  plot::LinePlot plot = sequenceLengthPlot(
      "LSH vs dense: forward time per token at B*N = " + std::to_string(T) + " tokens",
      "time per token (us)", lengths);
  for (size_t c = 0; c < ms.front().size(); ++c) {
    plot::Series s{c == 0 ? std::string("dense")
                          : "LSH " + std::to_string(lsh[c - 1].rounds) + " rounds",
                   {},
                   {},
                   plot::paletteColor(int(c)),
                   2.0};
    for (size_t i = 0; i < lengths.size(); ++i)
      s.x.push_back(lengths[i]), s.y.push_back(usPerToken(ms[i][c]));
    plot.series.push_back(std::move(s));
  }
  if (Status s = plot::writeLinePlot(opt.sweepSvg, plot); !s) {
    diagnostics() << "attnc bench: error: " << s.error() << "\n";
    return mlir::failure();
  }
  results() << "wrote " << opt.sweepCsv << " and " << opt.sweepSvg << "\n";
  return mlir::success();
}

} // namespace attnc::driver
