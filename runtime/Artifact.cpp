//===- Artifact.cpp - Load and run an attnc artifact directory ------------===//
#include "runtime/Artifact.h"

#include "runtime/CudaAttention.h"
#include "runtime/KernelHeaders.h"
#include "runtime/CudaDriver.h"
#include "runtime/FileSystem.h"
#include "runtime/KernelCache.h"

#include <chrono>
#include <iomanip>
#include <sstream>

namespace attnc {

Expected<std::string> Artifact::file(const std::string &name) const {
  if (auto it = files.find(name); it != files.end())
    return it->second;
  return fs::readFile(dir + "/" + name);
}

Expected<Artifact> openArtifact(const std::string &dir) {
  Expected<Manifest> manifest = loadManifest(dir);
  if (!manifest)
    return manifest.takeError();
  Artifact a;
  a.dir = dir;
  a.manifest = std::move(*manifest);
  return a;
}

AttentionSignature signatureOf(const ManifestKernel &fwd) {
  AttentionSignature sig;
  sig.name = fwd.name;
  sig.lowrank = fwd.kvSource == "lowrank";
  sig.share = fwd.share;
  sig.k = fwd.lowrankK;
  sig.keyPadding = fwd.keyPadding;
  sig.params = fwd.params;
  sig.sharedQk = fwd.sharedQk;
  if (fwd.lsh) {
    sig.lshRounds = fwd.lsh->rounds;
    sig.lshBuckets = fwd.lsh->numBuckets;
    sig.lshSeed = uint64_t(fwd.lsh->seed);
  }
  return sig;
}

Status runArtifactAttention(const ArtifactRunOptions &opt) {
  std::ostream &progress = streamOrNull(opt.log);
  std::string manifestPath = opt.dir + "/manifest.json";
  Expected<Manifest> manifest = loadManifest(opt.dir);
  if (!manifest)
    return manifest.takeError();
  // cuda-sim runs a CUDA artifact's kernels on the SIMT emulator.
  const bool emulate = opt.target == "cuda-sim" && manifest->target == "cuda";
  if (opt.target != manifest->target && !emulate && manifest->target == "cuda")
    return makeError(opt.dir + " was compiled for target cuda, not " + opt.target +
                     "; run it with --target cuda (on a GPU) or --target cuda-sim (on the CPU's "
                     "SIMT emulator), or recompile with attnc compile --target " +
                     opt.target);
  if (opt.target != manifest->target && !emulate)
    return makeError(opt.dir + " was compiled for target " + manifest->target + ", not " +
                     opt.target + "; recompile with attnc compile --target " +
                     (opt.target == "cuda-sim" ? std::string("cuda") : opt.target));
  if (manifest->target == "cuda" && !emulate) {
    if (Status driver = cuda::Driver::available(); !driver)
      return makeError("target cuda: " + driver.error());
    // Any GPU: CudaAttention::compile compiles for the one present and
    // re-tiles for it (runtime/DeviceTiling.h).
    if (Expected<GpuArch> want = parseGpuArch(manifest->arch); !want)
      return makeError(manifestPath + ": arch: " + want.error());
  } else if (!opt.asArch.empty() && manifest->target == "cpu") {
    return makeError("--as-arch " + opt.asArch + " applies to CUDA artifacts (--target cuda or " +
                     "cuda-sim), and " + opt.dir + " was compiled for the CPU");
  } else if (manifest->target != "cpu" && !emulate) {
    return makeError(manifestPath + ": target: expected cpu or cuda, found '" + manifest->target +
                     "'");
  }
  // The forward kernel, and the backward of the same function.
  const ManifestKernel *fwd = nullptr, *bwd = nullptr;
  std::string names;
  for (const ManifestKernel &k : manifest->kernels)
    if (!k.backward) {
      names += (names.empty() ? "" : ", ") + k.name;
      if (!fwd && (opt.kernel.empty() || k.name == opt.kernel))
        fwd = &k;
    }
  if (!fwd)
    return makeError(opt.kernel.empty() ? manifestPath + " has no forward kernel"
                                        : "no forward kernel '" + opt.kernel + "' in " +
                                              manifestPath + " (it has: " + names + ")");
  for (const ManifestKernel &k : manifest->kernels)
    if (k.backward && k.function == fwd->function)
      bwd = &k;
  if (!opt.grad.empty() && !bwd)
    return makeError(manifestPath + ": kernel " + fwd->name + " has no backward kernel");

  const AttentionSignature sig = signatureOf(*fwd);
  Expected<std::unique_ptr<AttentionIO>> io =
      loadAttentionIO(opt.inputs, opt.weights, opt.grad, sig, opt.seed, [&](const std::string &m) {
        progress << opt.tool << ": warning: " << m << "\n";
      });
  if (!io)
    return io.takeError();
  if ((*io)->D != fwd->headDim)
    return makeError(opt.inputs + ": tensor 'q' has head dim " + std::to_string((*io)->D) +
                     " but " + opt.dir + " was compiled for head dim " +
                     std::to_string(fwd->headDim));
  if (sig.lowrank && (*io)->nmax > fwd->maxSeq)
    return makeError("E covers " + std::to_string((*io)->nmax) + " positions but " + opt.dir +
                     " was compiled for at most " + std::to_string(fwd->maxSeq));

  Expected<std::string> source = fs::readFile(opt.dir + "/" + manifest->source);
  if (!source)
    return source.takeError();
  auto t0 = std::chrono::steady_clock::now();
  std::optional<KernelDesc> bwdDesc;
  if (bwd && !opt.grad.empty())
    bwdDesc = bwd->desc();
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  // Compile and run on the target; `timing` describes where the time went.
  Expected<AttentionOutputs> result = makeError("no result");
  std::string timing;
  if (manifest->target == "cuda") {
    Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cuda);
    if (!dirs)
      return dirs.takeError();
    NvrtcCompiler nvrtc(&KernelCache::processDefault());
    HostCompiler host(&KernelCache::processDefault());
    Expected<CudaAttention> kernels =
        emulate ? CudaAttention::compileEmulated(*source, manifest->arch,
                                                 opt.asArch.empty() ? manifest->arch : opt.asArch,
                                                 fwd->dtype, fwd->desc(), bwdDesc, host)
                : CudaAttention::compile(*source, manifest->arch, fwd->dtype, fwd->desc(), bwdDesc,
                                         *dirs, nvrtc, true, opt.asArch);
    if (!kernels)
      return kernels.takeError();
    for (const std::string &line : kernels->retiled())
      progress << opt.tool << ": re-tiled for " << kernels->device() << ": " << line << "\n";
    auto t1 = std::chrono::steady_clock::now();
    result = kernels->run((*io)->inputs);
    std::ostringstream t;
    t << (emulate ? "on the SIMT emulator" : "on the GPU") << ": loaded in " << int(ms(t0, t1))
      << " ms; kernels forward " << std::setprecision(4) << kernels->forwardMs() << " ms";
    if (bwdDesc)
      t << ", backward " << kernels->backwardMs() << " ms";
    timing = t.str();
  } else {
    Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cpu);
    if (!dirs)
      return dirs.takeError();
    HostCompiler compiler(&KernelCache::processDefault());
    Expected<CpuAttention> kernels =
        CpuAttention::compile(*source, fwd->desc(), bwdDesc, *dirs, compiler);
    if (!kernels)
      return kernels.takeError();
    auto t1 = std::chrono::steady_clock::now();
    result = kernels->run((*io)->inputs);
    timing = std::string("kernels ") + (kernels->fromCache() ? "from cache" : "compiled") + " in " +
             std::to_string(int(ms(t0, t1))) + " ms, ran in " +
             std::to_string(ms(t1, std::chrono::steady_clock::now())) + " ms";
  }
  if (!result)
    return result.takeError();
  if (Status s = writeAttentionOutputs(opt.output, std::move(*result), **io, sig); !s)
    return s;
  progress << opt.tool << ": " << fwd->name << " from " << opt.dir << ": " << timing << "; wrote "
           << opt.output << "\n";
  return {};
}

} // namespace attnc
