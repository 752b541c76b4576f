//===- Compile.cpp - Spec to kernels and artifacts ------------------------===//
#include "driver/Compile.h"
#include "driver/Report.h"
#include "driver/ArtifactBuilder.h"
#include "driver/ModelGraph.h"
#include "driver/tune/Tune.h"

#include "dialect/AttnDialect.h"
#include "dsl/MLIRGen.h"
#include "dsl/Parser.h"
#include "passes/Pipelines.h"

#include "attnc/abi/TileModel.h"
#include "runtime/CudaAttention.h"
#include "runtime/KernelHeaders.h"
#include "runtime/KernelCache.h"
#include "runtime/NvrtcCompiler.h"
#include "runtime/NvrtcLibraries.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <fstream>
#include <mutex>
#include <set>
#include <ostream>
#include <sstream>

using namespace mlir;

namespace attnc::driver {

mlir::LogicalResult compileFunctions(ModuleOp module, const std::string &target,
                                     const std::string &arch, CompiledKernels &out) {
  PassManager pm(module.getContext());
  KernelPipelineOptions kernel;
  kernel.target = target, kernel.arch = arch;
  populateKernelPipeline(pm, kernel);
  if (failed(pm.run(module)))
    return mlir::failure();
  llvm::raw_string_ostream os(out.source);
  if (failed(codegen::emitKernels(
          module, target == "cpu" ? codegen::Target::Cpu : codegen::Target::Cuda, os, out.kernels)))
    return mlir::failure();
  if (target == "cuda")
    notePrecisionOnArch(out.kernels, arch, diagnostics());
  return mlir::success();
}

void notePrecisionOnArch(const std::vector<ManifestKernel> &kernels, const std::string &arch,
                         std::ostream &os) {
  Expected<GpuArch> gpu = parseGpuArch(arch);
  if (!gpu)
    return;
  bool bf16 = false, fp16 = false;
  for (const ManifestKernel &k : kernels) {
    bf16 = bf16 || k.dtype == "bf16";
    fp16 = fp16 || k.dtype == "f16";
  }
  // What the kernel headers do there (kernels/cuda/attnc/mma.cuh,
  // copy.cuh). Once per process: attnc tune compiles many candidates.
  static std::mutex mutex; // compiles may run on several threads
  static std::set<std::string> said;
  auto note = [&](const std::string &text) {
    std::lock_guard<std::mutex> lock(mutex);
    if (said.insert(text).second)
      os << "attnc: note: " << text << "\n";
  };
  if (bf16 && gpu->sm < 80)
    note(arch + " has no bf16 tensor cores: bf16 kernels keep bf16 in memory and compute in fp32 "
                "(SIMT FMAs), as fast as fp32 at best");
  if (fp16 && gpu->sm < 75)
    note(arch + " (Volta): fp16 kernels run on mma.sync.m8n8k4 tensor cores, with "
                "register-staged copies (no cp.async) and no ldmatrix");
}

namespace {

/// `source` compiled by NVRTC for `arch` with the CUDA kernel tree on its
/// include path (cached).
Expected<Cubin> compileWithKernelTree(const std::string &name, const std::string &source,
                                      const std::string &arch) {
  NvrtcCompiler nvrtc(&KernelCache::processDefault());
  NvrtcOptions options;
  options.arch = arch;
  Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cuda);
  if (!dirs)
    return dirs.takeError();
  options.includeDirs = *dirs;
  return nvrtc.compile(name, source, options);
}

} // namespace

Expected<Cubin> compileCudaKernels(const CompiledKernels &compiled, const std::string &arch) {
  return compileWithKernelTree("attnc_kernels.cu", compiled.source, arch);
}

Expected<Cubin> compileDeviceSupport(const std::string &arch) {
  return compileWithKernelTree("attnc_device_support.cu", CudaAttention::deviceSupportSource(),
                               arch);
}

int launchSharedBytes(const ManifestKernel &k, const std::string &entry, const KernelResources &r) {
  // Only the attention loops use the tile's dynamic shared memory.
  bool usesTile = entry.find("_preprocess_") == std::string::npos &&
                  entry.find("_dparams_") == std::string::npos &&
                  entry.find("_shared_qk_") == std::string::npos;
  return r.staticSmemBytes + (usesTile ? int(k.smemBytes) : 0);
}

mlir::LogicalResult checkWithNvrtc(const CompiledKernels &compiled, const std::string &arch,
                                   std::ostream &os) {
  Expected<GpuArch> gpu = parseGpuArch(arch);
  if (!gpu) {
    diagnostics() << "attnc: error: " << gpu.error() << "\n";
    return mlir::failure();
  }
  Expected<Cubin> cubin = compileCudaKernels(compiled, arch);
  if (!cubin) {
    diagnostics() << "attnc: error: " << cubin.error() << "\n";
    return mlir::failure();
  }
  int limit = attnc::tile::smemLimitBytes(gpu->sm);
  int failures = 0, checked = 0, mostRegisters = 0, mostSmem = 0;
  std::string failed;
  // The NVRTC that compiled for this arch (a CUDA 12 one for Volta).
  Expected<const NvrtcLibrary *> lib = chooseNvrtc(gpu->sm, nvrtcLibraries());
  os << "NVRTC " << NvrtcCompiler::versionFor(gpu->sm) << " " << arch << ": "
     << (cubin->fromCache ? "from cache" : "compiled") << ", " << cubin->image.size()
     << " bytes of CUBIN" << (lib ? " (" + (*lib)->origin + ")" : "") << "\n";
  for (const ManifestKernel &k : compiled.kernels)
    for (const std::string &entry : k.entryPoints) {
      const KernelResources *r = cubin->kernel(entry);
      if (!r) {
        os << "  " << entry << ": MISSING from the ptxas report\n";
        ++failures;
        continue;
      }
      int smem = launchSharedBytes(k, entry, *r);
      bool ok = !r->spills() && r->registers <= attnc::tile::kMaxRegsPerThread && smem <= limit;
      os << "  " << (ok ? "ok  " : "FAIL") << " " << entry << ": " << r->registers << " registers, "
         << r->spillStoreBytes << "+" << r->spillLoadBytes << " bytes spilled, " << smem << " of "
         << limit << " bytes shared memory\n";
      failures += !ok, ++checked;
      mostRegisters = std::max(mostRegisters, r->registers), mostSmem = std::max(mostSmem, smem);
      if (!ok)
        failed += (failed.empty() ? "" : ", ") + entry;
    }
  // The verdict last, where a reader of a long table looks.
  os << arch << ": " << checked - failures << " of " << checked
     << " attention kernels within limits (at most " << mostRegisters << " registers, " << mostSmem
     << " of " << limit << " bytes shared memory)" << (failed.empty() ? "" : "; failed: " + failed)
     << "\n";
  if (failures) {
    diagnostics() << "attnc: error: " << failures << " kernel(s) failed the " << arch
                  << " resource check\n";
    return mlir::failure();
  }
  return mlir::success();
}

namespace {
mlir::LogicalResult fail(const std::string &msg) {
  diagnostics() << "attnc: error: " << msg << "\n";
  return mlir::failure();
}
} // namespace

mlir::LogicalResult runCompile(const CompileCommandOptions &given) {
  CompileCommandOptions opts = given;
  if (opts.target.empty())
    opts.target = opts.checkNvrtc ? "cuda" : "cpu";
  if (opts.target == "cuda-sim") // the emulator runs the CUDA artifact
    opts.target = "cuda";
  if (opts.target != "cpu" && opts.target != "cuda")
    return fail("--target must be cpu, cuda or cuda-sim, found '" + opts.target + "'");
  if (opts.arch.empty())
    opts.arch = defaultCudaArch();
  std::string err;
  if (!checkArch(opts.arch, err))
    return fail(err);
  std::string buffer;
  if (!readSpecFile(opts.spec, buffer, err))
    return fail(err);

  std::optional<ast::Spec> spec = parseSpec(buffer, opts.spec);
  if (!spec)
    return mlir::failure();

  std::ofstream file;
  std::ostream *os = &results();
  if (!opts.emit.empty() && !opts.output.empty()) {
    file.open(opts.output);
    if (!file)
      return fail("cannot write '" + opts.output + "'");
    os = &file;
  }

  if (opts.emit == "ast") {
    ast::dump(*spec, *os);
    return mlir::success();
  }
  MLIRContext context;
  OwningOpRef<ModuleOp> module = buildSpecModule(context, *spec);
  if (!module)
    return mlir::failure();

  if (opts.emit == "graph" || opts.emit == "model-cpp" || opts.emit == "model-cuda") {
    // Whole-model compilation: each model's planned training step, with
    // the choices attnc train makes.
    ResolveFor resolve;
    if (opts.emit == "model-cuda")
      resolve.target = "cuda", resolve.arch = opts.arch;
    if (!resolveAuto(*module, resolve))
      return mlir::failure();
    for (attn::ModelOp model : module->getOps<attn::ModelOp>()) {
      ModelGraph g;
      // As attnc train runs it by default: standard layers recomputed.
      ModelGraphOptions graph;
      graph.batch = opts.planBatch, graph.emitSource = true, graph.recomputeLayers = true;
      if (!compileModelGraph(*module, model, graph, g))
        return mlir::failure();
      if (opts.emit == "model-cuda")
        *os << g.step.cudaDeviceSource << "\n// ---- host side ----\n" << g.step.cudaHostSource;
      else
        *os << (opts.emit == "graph" ? g.ir + "\n" : g.step.source);
    }
    return mlir::success();
  }

  if (opts.emit == "cuda" || opts.emit == "cpp" || opts.checkNvrtc ||
      (opts.emit.empty() && !opts.output.empty())) {
    std::string target = opts.emit == "cpp" ? "cpu" : opts.emit == "cuda" ? "cuda" : opts.target;
    // The tuning database's tiles for the target, and (CPU measurements:
    // the CPU target) k / LSH rounds from attnc tune --max-error, where the
    // spec left them auto; then the heuristics.
    ResolveFor resolve;
    resolve.target = target, resolve.arch = opts.arch;
    resolve.report = true;
    if (!resolveAuto(*module, resolve))
      return mlir::failure();
    ArtifactOptions ao;
    ao.target = target, ao.arch = opts.arch, ao.batch = opts.planBatch;
    if (!opts.emit.empty() || opts.output.empty()) { // the kernels alone
      CompiledKernels compiled;
      if (mlir::failed(compileModelKernels(*module, ao, target, compiled)))
        return mlir::failure();
      if (opts.checkNvrtc) {
        if (target != "cuda")
          return fail("--check-nvrtc needs the cuda target");
        if (mlir::failed(checkWithNvrtc(compiled, opts.arch, results())))
          return mlir::failure();
        if (mlir::failed(checkModelStepsWithNvrtc(*module, opts.arch, opts.planBatch, results())))
          return mlir::failure();
      }
      if (!opts.emit.empty())
        *os << compiled.source;
      return mlir::success();
    }
    Artifact artifact;
    if (mlir::failed(buildArtifact(*module, sha256Hex(buffer), ao, artifact)))
      return mlir::failure();
    const Manifest &info = artifact.manifest;
    if (opts.checkNvrtc) {
      if (target != "cuda")
        return fail("--check-nvrtc needs the cuda target");
      CompiledKernels compiled{artifact.files[info.source], info.kernels};
      if (mlir::failed(checkWithNvrtc(compiled, opts.arch, results())))
        return mlir::failure();
      if (mlir::failed(checkModelStepsWithNvrtc(*module, opts.arch, opts.planBatch, results())))
        return mlir::failure();
    }
    if (mlir::failed(writeArtifact(opts.output, artifact)))
      return mlir::failure();
    results() << "wrote " << opts.output << "/{manifest.json," << info.source
              << ",attn.mlir}: " << info.kernels.size() << " kernel(s) for " << info.target << " "
              << info.arch << "\n";
    if (!info.hostSource.empty())
      results() << "wrote " << opts.output << "/" << info.hostSource << ": the same attention for "
                << "the CPU (" << info.hostKernels.size()
                << " kernel(s)), which the CUDA step calls under --engine cuda-sim\n";
    for (const ManifestModel &m : info.models) {
      for (const std::string &file : {m.stepKernels, m.stepSource})
        if (!file.empty())
          results() << "wrote " << opts.output << "/" << file << ": the compiled training step "
                    << "(batch " << m.batch << "; attnc-rt train " << opts.output
                    << " trains it)\n";
      if (m.inferSource != m.stepSource)
        results() << "wrote " << opts.output << "/" << m.inferSource
                  << ": the inference function (CPU C++, batch " << m.inferBatch << ")\n";
    }
    reportMemoryPlans(*module, opts.planBatch, results());
    reportCompiledPlans(*module, opts.planBatch, results());
    return mlir::success();
  }

  if (opts.emit == "lowered" || (opts.emit.empty() && opts.memoryPlan)) {
    ResolveFor report;
    report.target = opts.target == "cuda" ? "cuda" : "cpu", report.arch = opts.arch;
    report.report = true;
    if (!resolveAuto(*module, report))
      return mlir::failure();
  }
  if (!opts.emit.empty()) {
    std::string text;
    llvm::raw_string_ostream rs(text);
    module->print(rs);
    *os << rs.str() << "\n";
    return mlir::success();
  }
  results() << opts.spec << ": ok (" << spec->attentions.size() << " attention variant(s), "
            << spec->models.size() << " model(s))\n";
  if (opts.memoryPlan) {
    reportMemoryPlans(*module, opts.planBatch, results());
    reportCompiledPlans(*module, opts.planBatch, results());
  }
  return mlir::success();
}

} // namespace attnc::driver
