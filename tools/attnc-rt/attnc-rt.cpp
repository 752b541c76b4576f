//===- attnc-rt.cpp - Run attnc artifacts without MLIR --------------------===//
//
// The runtime's own command line, for machines with CUDA and a C++ compiler
// but no MLIR (the GPU machine): runs an artifact directory that `attnc
// compile -o DIR` wrote elsewhere, and reports what this machine has.
//
//===----------------------------------------------------------------------===//
#include "runtime/Artifact.h"
#include "runtime/CudaDriver.h"
#include "runtime/KernelCache.h"
#include "runtime/NvrtcCompiler.h"
#include "runtime/NvrtcLibraries.h"
#include "runtime/Version.h"
#include "runtime/dist/Nccl.h"
#include "runtime/train/ArtifactTrain.h"
#include "runtime/tune/AttentionBench.h"
#include "tools/Interrupt.h"
#include "tools/TargetFlags.h"
#include "tools/TrainFlags.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

namespace {
/// `attnc-rt info`: the toolchain, cache, engines and GPU (and with
/// --collectives, NCCL's collectives checked on it).
int printInfo(bool collectives);
} // namespace

int main(int argc, char **argv) {
  // First: under mpirun this process is one rank of a data-parallel run.
  if (attnc::Status s = attnc::dist::initialize(&argc, &argv); !s) {
    std::cerr << "attnc-rt: error: " << s.error() << "\n";
    return 1;
  }
  CLI::App app{"attnc-rt: run attnc artifacts (no MLIR needed)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("attnc-rt ") + attnc::attncVersion());

  attnc::ArtifactRunOptions opts;
  opts.log = &std::cerr;
  CLI::App *run = app.add_subcommand("run", "Run one attention op of an artifact directory");
  run->add_option("dir", opts.dir, "artifact directory (attnc compile -o DIR)")->required();
  run->add_option("--kernel", opts.kernel, "forward kernel name (default: the first)");
  run->add_option("--inputs", opts.inputs, "safetensors with q, k, v and optional lengths")
      ->required();
  run->add_option("--weights", opts.weights, "safetensors with E, F and per-head parameters");
  run->add_option("--grad", opts.grad, "safetensors with dout: also compute the gradients");
  run->add_option("--output", opts.output, "safetensors to write")->required();
  attnc::tools::addTargetFlag(run, opts.target, "the artifact's attention runs",
                              "cuda and cuda-sim run a CUDA artifact, cpu a CPU one");
  run->add_option("--seed", opts.seed, "seed of weights the weights file lacks")
      ->capture_default_str();
  run->add_option("--arch,--as-arch", opts.asArch,
                  "the CUDA architecture whose code path and tiles the kernels take (default: "
                  "the artifact's); an older one than the GPU's is compiled to "
                  "its PTX, which the driver JITs (sm_70 needs a CUDA 12 NVRTC, "
                  "scripts/bootstrap.sh); --as-arch is its former name");
  attnc::train::ArtifactTrainOptions topts;
  topts.log = &std::cerr;
  CLI::App *train = app.add_subcommand(
      "train", "Train the compiled model of an artifact (attnc compile --target cpu|cuda -o DIR; "
               "a CUDA artifact trains on the GPU)");
  train->add_option("dir", topts.dir, "artifact directory")->required();
  train->add_option("--model", topts.model, "which compiled model (default: the only one)");
  train->add_option("--data", topts.data, "text file(s) or directory, or synthetic:duplicate")
      ->required();
  attnc::tools::addTrainSettingFlags(train, topts.flags);
  train->add_option("--batch", topts.flags.batch,
                    "sequences per step, the global batch: the artifact's planned batch times "
                    "the micro-batches (default: that)");
  train->add_option("--seed", topts.seed, "initialisation, data and dropout seed")
      ->capture_default_str();
  train->add_option("--out", topts.out, "run directory")->capture_default_str();
  train
      ->add_option("--precision", topts.precision,
                   "CUDA artifacts: the GEMMs' compute precision (fp32 storage and master "
                   "weights; fp16 with dynamic loss scaling); auto: the attention kernels' "
                   "dtype (the model's)")
      ->check(CLI::IsMember({"auto", "f32", "tf32", "bf16", "fp16"}))
      ->capture_default_str();
  train
      ->add_option("--loss-scale", topts.lossScale,
                   "--precision fp16: the initial loss scale (default 65536)")
      ->check(CLI::PositiveNumber);
  train->add_flag("--host-optimizer", topts.hostOptimizer,
                  "CUDA artifacts: AdamW on the host on downloaded gradients (default: on the "
                  "device, the parameters staying there)");
  attnc::tools::addRunFlags(train, topts.checkpointEvery, topts.resume, topts.stopAfter,
                            topts.initFrom);
  attnc::tools::addDataParallelFlags(train, topts.parallel);
  train
      ->add_option("--engine", topts.engine,
                   "kept for scripts: cuda-sim is --target cuda-sim; compiled (the default) "
                   "is the artifact's step on its own target")
      ->check(CLI::IsMember({"compiled", "cuda-sim"}))
      ->capture_default_str();
  std::string trainTarget;
  attnc::tools::addTargetFlag(train, trainTarget, "the step runs",
                              "cuda-sim: a CUDA artifact's step, its kernels on the emulator (no "
                              "GPU; slow)",
                              "the artifact's own target");
  train->add_flag("--host-attention", topts.hostAttention,
                  "CUDA steps: attention through the host (operands downloaded and results "
                  "uploaded each call; cuda-sim: on the artifact's CPU kernels) instead of the "
                  "f32 dense and LSH kernels on the step's own buffers");

  std::string benchDir, benchCsv;
  std::vector<std::string> benchShapes;
  attnc::tune::AttentionBenchOptions bopts;
  CLI::App *bench = app.add_subcommand(
      "bench", "Time a CUDA artifact's attention kernels (forward and backward) on random inputs: "
               "milliseconds by CUDA events, TFLOP/s against the GPU's datasheet peak, memory");
  bench->add_option("dir", benchDir, "CUDA artifact directory (attnc compile --target cuda)")
      ->required();
  bench->add_option("--shape", benchShapes,
                    "B,H,N to time (repeatable; default 4,16,1024 and "
                    "2,16,4096)");
  bench->add_option("--kernel", bopts.kernel, "only this forward kernel (default: all)");
  bench->add_option("--repeats", bopts.repeats, "timed runs after one warm-up (the median)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  bench
      ->add_option("--target", bopts.target,
                   "cuda (a GPU), or cuda-sim (the SIMT emulator: rehearses the mechanics; its "
                   "times are the CPU's)")
      ->check(CLI::IsMember({"cuda", "cuda-sim"}))
      ->capture_default_str();
  bench->add_flag("!--no-backward", bopts.backward, "time the forward only");
  bench->add_option("--csv", benchCsv, "also write the rows as CSV here");

  CLI::App *info = app.add_subcommand("info", "Print the toolchain, cache and GPU of this machine");
  bool collectives = false;
  info->add_flag("--collectives", collectives,
                 "also check NCCL on the GPU: a communicator over the ranks (run it under "
                 "mpirun -np N to check N), an all-reduce, all-gather and all-to-all of device "
                 "buffers against host values; exits 1 when they fail or cannot run");

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success &e) {
    return app.exit(e);
  } catch (const CLI::ParseError &e) {
    app.exit(e);
    return 1;
  }
  if (run->parsed()) {
    attnc::Status s = attnc::runArtifactAttention(opts);
    if (!s) {
      std::cerr << "attnc-rt run: error: " << s.error() << "\n";
      return 1;
    }
    return 0;
  }
  if (train->parsed()) {
    if (trainTarget == "cuda-sim")
      topts.engine = "cuda-sim";
    else
      topts.target = trainTarget;
    if (attnc::dist::world().size() == 1)
      topts.stop = attnc::tools::stopOnInterrupt("attnc-rt train");
    return attnc::tools::runAsRank([&] {
      auto r = attnc::train::trainArtifact(topts);
      if (!r) {
        std::cerr << "attnc-rt train: error: " << r.error() << "\n";
        return 1;
      }
      attnc::train::writeTrainReport(*r, topts.out, std::cout);
      return r->summary.interrupted ? attnc::tools::interruptedExitCode() : 0;
    });
  }
  if (bench->parsed()) {
    if (!benchShapes.empty())
      bopts.shapes.clear();
    for (const std::string &text : benchShapes) {
      long long b = 0, h = 0, n = 0;
      char tail = 0;
      if (std::sscanf(text.c_str(), "%lld,%lld,%lld%c", &b, &h, &n, &tail) != 3 || b < 1 || h < 1 ||
          n < 1) {
        std::cerr << "attnc-rt bench: error: --shape '" << text
                  << "': expected B,H,N (three positive integers)\n";
        return 1;
      }
      bopts.shapes.push_back({b, h, n});
    }
    attnc::Expected<attnc::Artifact> artifact = attnc::openArtifact(benchDir);
    if (!artifact) {
      std::cerr << "attnc-rt bench: error: " << artifact.error() << "\n";
      return 1;
    }
    auto rows = attnc::tune::benchArtifactAttention(*artifact, bopts);
    if (!rows) {
      std::cerr << "attnc-rt bench: error: " << rows.error() << "\n";
      return 1;
    }
    attnc::tune::printBenchTable(std::cout, *rows);
    if (!benchCsv.empty())
      if (attnc::Status s = attnc::tune::writeBenchCsv(benchCsv, *rows); !s) {
        std::cerr << "attnc-rt bench: error: " << s.error() << "\n";
        return 1;
      }
    return 0;
  }
  if (info->parsed())
    return attnc::tools::runAsRank([&] { return printInfo(collectives); });
  return 0;
}

namespace {

int printInfo(bool collectives) {
  {
    std::cout << "attnc-rt " << attnc::attncVersion() << "\n"
              << "CUDA toolkit " << attnc::cudaToolkitVersion() << ", NVRTC "
              << attnc::NvrtcCompiler::version() << "\n"
              << "kernel cache " << attnc::KernelCache::defaultDirectory() << "\n";
    // Every NVRTC found, and what it targets (sm_70 needs a CUDA 12 one).
    std::vector<std::string> problems;
    for (const attnc::NvrtcLibrary &l : attnc::findNvrtcLibraries(&problems))
      std::cout << "NVRTC " << l.describe() << " from " << l.origin << " (" << l.path << ")"
                << (l.targets(70) ? "; targets sm_70 (Volta)" : "; no sm_70") << "\n";
    for (const std::string &p : problems)
      std::cout << "NVRTC not usable: " << p << "\n";
    // The cuBLAS GPU training would load: CUDA 13's or 12's from Turing on,
    // a cuBLAS 12 only on Volta (runtime/Cublas.h).
    for (int sm : {0, 70}) {
      attnc::Expected<std::string> blas = attnc::cuda::Cublas::find(sm);
      std::cout << "cuBLAS for " << (sm ? "sm_70 (Volta)" : "sm_75 and newer") << ": "
                << (blas ? *blas : "none (" + blas.error() + ")") << "\n";
    }
    const std::string mpi = attnc::dist::mpiLibraryVersion();
    std::cout << "data-parallel training: "
              << (mpi.empty() ? "one process (built without MPI)" : "MPI (" + mpi + ")") << "\n";
    // GPU ranks' gradient exchange (runtime/dist/Nccl.h), loaded on demand.
    attnc::Expected<const attnc::dist::NcclLibrary *> nccl = attnc::dist::loadNccl();
    std::cout << "NCCL: "
              << (nccl ? (*nccl)->versionString() + " from " + (*nccl)->path + " (" +
                             (*nccl)->origin + ")"
                       : "none (" + nccl.error().substr(0, nccl.error().find('\n')) + ")")
              << "\n";
    attnc::Status driver = attnc::cuda::Driver::available();
    if (!driver)
      std::cout << "GPU: none (" << driver.error() << ")\n";
    else {
      attnc::Expected<attnc::cuda::DeviceInfo> dev = attnc::cuda::queryDevice(0);
      std::cout << "GPU: " << (dev ? dev->describe() : dev.error()) << "\n";
    }
  }
  if (!collectives)
    return 0;
  attnc::Expected<std::string> report = attnc::dist::checkCollectives(attnc::dist::world());
  if (!report) {
    std::cerr << "attnc-rt info: collectives: " << report.error() << "\n";
    return 1;
  }
  std::cout << "collectives: " << *report << "\n";
  return 0;
}

} // namespace
