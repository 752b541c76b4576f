//===- AttentionBench.cpp - An artifact's CUDA attention kernels, timed ---===//
#include "runtime/tune/AttentionBench.h"

#include "runtime/CudaAttention.h"
#include "runtime/CudaDriver.h"
#include "runtime/FileSystem.h"
#include "runtime/KernelCache.h"
#include "runtime/KernelHeaders.h"
#include "runtime/tune/Measure.h"

#include <cstdio>
#include <iomanip>
#include <sstream>

namespace attnc::tune {

double datasheetPeakTflops(int sm, const std::string &dtype) {
  const bool tc = dtype == "f16" || dtype == "bf16";
  if (dtype == "bf16" && sm < 80)
    return 0; // no bf16 tensor cores: the kernels take the SIMT path
  switch (sm) {
  case 70: // V100 SXM2
    return tc ? 125 : 15.7;
  case 75: // T4
    return tc ? 65 : 8.1;
  case 80: // A100 SXM
    return tc ? 312 : 19.5;
  case 86: // A10
    return tc ? 125 : 31.2;
  case 89: // L40S
    return tc ? 362 : 91.6;
  case 90: // H100 / H200 SXM
    return tc ? 989 : 67;
  default:
    return 0;
  }
}

namespace {

/// Attention FLOPs of one forward (docs/design.md, Measuring).
double forwardFlops(const ManifestKernel &k, int64_t B, int64_t H, int64_t N) {
  const double bhd = double(B) * H * k.headDim;
  if (k.lsh) {
    const double keys = double(k.lsh->chunk) * (1 + k.lsh->before + k.lsh->after);
    return 4 * bhd * N * keys * k.lsh->rounds;
  }
  if (k.kvSource == "lowrank")
    return 4 * bhd * N * k.lowrankK;
  return 4 * bhd * N * N * (k.causal ? 0.5 : 1.0);
}

} // namespace

Expected<std::vector<AttentionBenchRow>> benchArtifactAttention(const Artifact &artifact,
                                                                const AttentionBenchOptions &opt) {
  const Manifest &m = artifact.manifest;
  if (m.target != "cuda")
    return makeError(artifact.dir + " was compiled for target " + m.target +
                     "; the GPU benchmark needs a CUDA artifact (attnc compile --target cuda)");
  if (opt.target != "cuda" && opt.target != "cuda-sim")
    return makeError("bench --target: expected cuda or cuda-sim, found '" + opt.target + "'");
  const bool emulate = opt.target == "cuda-sim";
  if (!emulate)
    if (Status driver = cuda::Driver::available(); !driver)
      return makeError("bench --target cuda: " + driver.error() +
                       " (--target cuda-sim runs the same kernels on the CPU's SIMT emulator)");
  Expected<std::string> source = artifact.file(m.source);
  if (!source)
    return source.takeError();
  Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cuda);
  if (!dirs)
    return dirs.takeError();
  int sm = 0;
  if (!emulate) {
    Expected<cuda::DeviceInfo> dev = cuda::queryDevice(0);
    if (!dev)
      return dev.takeError();
    sm = dev->ccMajor * 10 + dev->ccMinor;
  } else if (Expected<GpuArch> a = parseGpuArch(m.arch)) {
    sm = a->sm;
  }
  std::vector<AttentionBenchRow> rows;
  bool found = false;
  for (const ManifestKernel &fwd : m.kernels) {
    if (fwd.backward || (!opt.kernel.empty() && fwd.name != opt.kernel))
      continue;
    found = true;
    const ManifestKernel *bwd = nullptr;
    for (const ManifestKernel &k : m.kernels)
      if (k.backward && k.function == fwd.function)
        bwd = &k;
    std::optional<KernelDesc> bwdDesc;
    if (opt.backward && bwd)
      bwdDesc = bwd->desc();
    NvrtcCompiler nvrtc(&KernelCache::processDefault());
    HostCompiler host(&KernelCache::processDefault());
    Expected<CudaAttention> kernels =
        emulate
            ? CudaAttention::compileEmulated(*source, m.arch, m.arch, fwd.dtype, fwd.desc(),
                                             bwdDesc, host)
            : CudaAttention::compile(*source, m.arch, fwd.dtype, fwd.desc(), bwdDesc, *dirs, nvrtc);
    if (!kernels)
      return kernels.takeError();
    for (const auto &[B, H, N] : opt.shapes) {
      if (fwd.kvSource == "lowrank" && N > fwd.maxSeq)
        continue; // E covers at most maxSeq positions
      AttentionExtras extras;
      if (fwd.kvSource == "lowrank")
        extras.lowrankK = fwd.lowrankK, extras.share = fwd.share;
      extras.numParams = fwd.numParams;
      if (fwd.lsh)
        extras.lshRounds = fwd.lsh->rounds, extras.lshBuckets = fwd.lsh->numBuckets;
      RandomAttentionInputs inputs(B, H, N, fwd.headDim, bool(bwdDesc), extras);
      std::vector<double> f, b;
      for (int r = 0; r <= opt.repeats; ++r) { // the first is the warm-up
        Expected<AttentionOutputs> out = kernels->run(inputs.in);
        if (!out)
          return makeError("kernel " + fwd.name + " at [" + std::to_string(B) + ", " +
                           std::to_string(H) + ", " + std::to_string(N) + "]: " + out.error());
        if (r)
          f.push_back(kernels->forwardMs()), b.push_back(kernels->backwardMs());
      }
      AttentionBenchRow row;
      row.kernel = fwd.name, row.dtype = fwd.dtype;
      row.kind = fwd.lsh                     ? "lsh"
                 : fwd.kvSource == "lowrank" ? "lowrank k=" + std::to_string(fwd.lowrankK)
                                             : std::string("dense");
      row.B = B, row.H = H, row.N = N, row.D = fwd.headDim;
      row.fwdMs = median(f);
      row.bwdMs = bwdDesc ? median(b) : 0;
      const double flops = forwardFlops(fwd, B, H, N);
      row.fwdTflops = row.fwdMs > 0 ? flops / (row.fwdMs * 1e9) : 0;
      row.bwdTflops = row.bwdMs > 0 ? 2.5 * flops / (row.bwdMs * 1e9) : 0;
      row.peakTflops = emulate ? 0 : datasheetPeakTflops(sm, fwd.dtype);
      row.deviceBytes = kernels->kernelDevice().traffic().peakBytes;
      row.device = kernels->device();
      const KernelDesc &k = kernels->forwardKernel();
      row.tile = std::to_string(k.blockQ) + "x" + std::to_string(k.blockKv) + " w" +
                 std::to_string(k.warps) + " s" + std::to_string(k.stages);
      rows.push_back(row);
    }
  }
  if (!found)
    return makeError(opt.kernel.empty()
                         ? artifact.dir + " has no forward kernel"
                         : "no forward kernel '" + opt.kernel + "' in " + artifact.dir);
  return rows;
}

void printBenchTable(std::ostream &os, const std::vector<AttentionBenchRow> &rows) {
  if (rows.empty())
    return;
  const bool emulated = rows.front().device.find("emulator") != std::string::npos;
  os << "attention kernels on " << rows.front().device
     << (emulated ? " (the host's clock: rehearses the mechanics, no GPU figures)"
                  : " (CUDA events; TFLOP/s by docs/design.md, Measuring; %peak of the "
                    "datasheet)")
     << "\n";
  os << std::left << std::setw(28) << "kernel" << std::setw(15) << "kind" << std::setw(6) << "dtype"
     << std::setw(22) << "B,H,N,D" << std::setw(16) << "tile" << std::right << std::setw(10)
     << "fwd ms" << std::setw(9) << "TFLOP/s" << std::setw(10) << "bwd ms" << std::setw(9)
     << "TFLOP/s" << std::setw(8) << "%peak" << std::setw(10) << "MiB"
     << "\n";
  for (const AttentionBenchRow &r : rows) {
    std::ostringstream shape;
    shape << r.B << "," << r.H << "," << r.N << "," << r.D;
    char line[256];
    std::snprintf(line, sizeof line, "%10.3f%9.2f%10.3f%9.2f", r.fwdMs, r.fwdTflops, r.bwdMs,
                  r.bwdTflops);
    os << std::left << std::setw(28) << r.kernel << std::setw(15) << r.kind << std::setw(6)
       << r.dtype << std::setw(22) << shape.str() << std::setw(16) << r.tile << line;
    if (r.peakTflops > 0) {
      std::snprintf(line, sizeof line, "%7.1f%%", 100 * r.fwdTflops / r.peakTflops);
      os << line;
    } else {
      os << std::right << std::setw(8) << "-";
    }
    std::snprintf(line, sizeof line, "%10.1f", double(r.deviceBytes) / (1 << 20));
    os << line << "\n";
  }
}

Status writeBenchCsv(const std::string &path, const std::vector<AttentionBenchRow> &rows) {
  std::ostringstream os;
  os << "kernel,kind,dtype,B,H,N,D,tile,fwd_ms,fwd_tflops,bwd_ms,bwd_tflops,peak_tflops,"
        "device_bytes,device\n";
  for (const AttentionBenchRow &r : rows)
    os << r.kernel << "," << r.kind << "," << r.dtype << "," << r.B << "," << r.H << "," << r.N
       << "," << r.D << "," << r.tile << "," << r.fwdMs << "," << r.fwdTflops << "," << r.bwdMs
       << "," << r.bwdTflops << "," << r.peakTflops << "," << r.deviceBytes << ",\"" << r.device
       << "\"\n";
  return fs::writeFileAtomic(path, os.str());
}

} // namespace attnc::tune
