//===- attnc.cpp - The attnc command line ---------------------------------===//
//
// Flags and help text only: each subcommand fills its driver options and
// calls the driver (driver/), which does the work and returns what happened;
// tools/ExitCodes.h turns that into the exit code.
//
//===----------------------------------------------------------------------===//
#include "driver/bench/Bench.h"
#include "driver/Compile.h"
#include "driver/PlotRuns.h"
#include "driver/Run.h"
#include "driver/Train.h"
#include "driver/perf/Perf.h"
#include "driver/tune/Tune.h"
#include "tools/ExitCodes.h"
#include "tools/TargetFlags.h"
#include "tools/TrainFlags.h"
#include "runtime/Version.h"

#include <CLI/CLI.hpp>

#include <iostream>

namespace {
using attnc::tools::exitCode;
using attnc::tools::kExitInput;
} // namespace

int main(int argc, char **argv) {
  // First: under mpirun this process is one rank of a data-parallel run.
  if (attnc::Status s = attnc::dist::initialize(&argc, &argv); !s) {
    std::cerr << "attnc: error: " << s.error() << "\n";
    return kExitInput;
  }
  CLI::App app{"attnc: a compiler for attention variants (dense, low-rank "
               "Linformer, LSH Reformer, user-defined)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("attnc ") + attnc::attncVersion() + " (CUDA " +
                                        attnc::cudaToolkitVersion() + ")");

  attnc::driver::CompileCommandOptions copts;
  CLI::App *compile = app.add_subcommand("compile", "Check a spec and lower it");
  compile->add_option("spec", copts.spec, "the .attn spec file")->required();
  attnc::tools::addTargetFlag(compile, copts.target, "the artifact's kernels run",
                              "cuda-sim writes the CUDA artifact, which attnc-rt runs on the "
                              "emulator; --emit cuda, cpp and model-cuda choose their own",
                              "cpu, or cuda with --check-nvrtc");
  attnc::tools::addArchFlag(compile, copts.arch,
                            "of the CUDA code (sm_70 compiles with a CUDA 12 NVRTC)");
  compile
      ->add_option(
          "--emit", copts.emit,
          "print one stage instead of writing an artifact: ast, mlir "
          "(attn dialect), lowered (after the pass pipeline), cuda, cpp, graph "
          "(each model's planned training step), model-cpp (its C++), model-cuda (its CUDA "
          "kernels, then the host code ordering them)")
      ->check(CLI::IsMember(
          {"ast", "mlir", "lowered", "cuda", "cpp", "graph", "model-cpp", "model-cuda"}));
  compile->add_flag("--check-nvrtc", copts.checkNvrtc,
                    "compile the CUDA kernels with NVRTC for --arch and check registers, "
                    "spills and shared memory (no GPU needed)");
  compile->add_flag("--memory-plan", copts.memoryPlan,
                    "print each model's training and inference memory plan (always printed "
                    "with an artifact)");
  compile
      ->add_option("--plan-batch", copts.planBatch,
                   "batch of the memory plans and of --emit graph/model-cpp")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  compile->add_option("-o,--output", copts.output,
                      "with --emit: the file to write (default stdout); without: "
                      "the artifact directory");

  attnc::driver::BenchOptions bopts;
  CLI::App *bench = app.add_subcommand(
      "bench", "Time attention side by side: on the CPU dense (fused and unfused), low-rank, "
               "LSH; on a GPU (--target cuda) the same kernel families by CUDA events with "
               "TFLOP/s against its peak; or the Linformer table, training steps, tuned kernels");
  attnc::tools::addTargetFlag(bench, bopts.target, "the timed kernels run",
                              "cuda exits 1 without a GPU; cuda-sim times mechanics only, at the "
                              "CPU's speed");
  bench->add_option("--dtype", bopts.dtype, "--target cuda, cuda-sim: the kernels' element type")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))
      ->capture_default_str();
  bench->add_option("--n", bopts.lengths, "sequence lengths")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bench->add_option("--k", bopts.ranks, "low-rank projection lengths")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bench->add_option("--batch", bopts.batch, "batch size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bench->add_option("--heads", bopts.heads, "heads")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bench->add_option("--head-dim", bopts.headDim, "head dim")
      ->check(CLI::IsMember({32, 64, 128}))
      ->capture_default_str();
  bench->add_option("--repeats", bopts.repeats, "timed repeats per kernel")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bench->add_option("--max-backward-n", bopts.maxBackwardN, "time fwd+bwd up to this N")
      ->capture_default_str();
  bench->add_option("--max-unfused-n", bopts.maxUnfusedN, "run the unfused baseline up to this N")
      ->capture_default_str();
  bench->add_flag("!--no-backward", bopts.backward, "time the forward only");
  bench->add_option("--csv", bopts.csv, "CSV output (--linformer-table: attnc-linformer-table.csv)")
      ->each([&](const std::string &) { bopts.csvGiven = true; })
      ->capture_default_str();
  bench
      ->add_option("--svg", bopts.svg, "plot output (--linformer-table: attnc-linformer-table.svg)")
      ->each([&](const std::string &) { bopts.svgGiven = true; })
      ->capture_default_str();
  bench->add_option("--tuned", bopts.tunedSpec,
                    "only the tuned-vs-heuristic comparison of this spec's tuned kernels "
                    "(the tuning database: $ATTNC_TUNING_DB or the user cache)");
  bench->add_option("--linformer-table", bopts.linformerTable,
                    "only the Linformer paper's inference table for this spec's low-rank model");
  bench->add_option("--engines", bopts.enginesSpec,
                    "only one training step of this spec's compiled model, keeping every "
                    "activation and (standard layers) recomputing each layer (time, memory)");
  bench->add_option("--model", bopts.model, "--engines: which model of the spec");
  bench->add_option("--layers", bopts.layers, "--linformer-table: layers of the models")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bench
      ->add_option("--memory-gib", bopts.memoryGiB,
                   "--linformer-table: memory budget of the max-batch search (GiB)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bench->add_option("--lsh-rounds", bopts.lshRounds, "LSH hash rounds to time")
      ->delimiter(',')
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  bench->add_option("--lsh-chunks", bopts.lshChunks, "LSH chunk sizes to time")
      ->delimiter(',')
      ->check(CLI::IsMember({16, 32, 64, 128, 256}))
      ->capture_default_str();
  bench->add_option("--lsh-buckets", bopts.lshBuckets, "LSH buckets (even)")
      ->check(CLI::Range(2, 1024))
      ->capture_default_str();
  bench
      ->add_option("--sweep-tokens", bopts.sweepTokens,
                   "LSH sweep: B*N held at this many tokens (0 skips the sweep)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  bench->add_option("--sweep-n", bopts.sweepLengths, "LSH sweep lengths (dividing the tokens)")
      ->delimiter(',')
      ->capture_default_str();
  bench->add_option("--sweep-csv", bopts.sweepCsv, "LSH sweep CSV output")->capture_default_str();
  bench->add_option("--sweep-svg", bopts.sweepSvg, "LSH sweep plot output")->capture_default_str();

  attnc::driver::PerfOptions popts;
  std::vector<long long> perfShape;
  CLI::App *perfCmd = app.add_subcommand(
      "perf", "Predict the CUDA attention kernels' time from their machine code, without a GPU: "
              "NVRTC's CUBIN, disassembled by nvdisasm, counted per pipe in each kernel's hot "
              "loop (docs/perf-model.md)");
  perfCmd->add_option("spec", popts.spec, "the .attn spec file")->required();
  perfCmd
      ->add_option("--arch", popts.archs,
                   "the CUDA architectures to model, comma-separated (sm_75, 80, 86, 89, 90; "
                   "nvdisasm reads no sm_70)")
      ->delimiter(',')
      ->capture_default_str();
  perfCmd
      ->add_option("--shape", perfShape,
                   "B,H,N: batch, heads and sequence length (default 2,16,8192)")
      ->delimiter(',')
      ->expected(3);
  perfCmd->add_option("--csv", popts.csv, "write every kernel's and pass's row to this CSV");
  perfCmd->add_option("--compare", popts.compare,
                      "an earlier --csv: print each kernel's predicted time against it, as ratios");

  attnc::driver::RunOptions ropts;
  CLI::App *run = app.add_subcommand(
      "run", "Run one attention op on safetensors inputs (forward, and backward with --grad)");
  run->add_option("spec", ropts.spec, "the .attn spec file, or an artifact directory")->required();
  run->add_option("--op", ropts.op, "attention or attention:NAME")->capture_default_str();
  run->add_option("--inputs", ropts.inputs,
                  "safetensors with q, k, v [B, H, N, Dh] f32 and optional lengths [B] i32")
      ->required();
  run->add_option("--weights", ropts.weights,
                  "safetensors with E, F and per-head parameters (absent ones come from --seed)");
  run->add_option("--grad", ropts.grad, "safetensors with dout: also compute the gradients");
  run->add_option("--output", ropts.output, "safetensors to write out, lse (and gradients)")
      ->required();
  attnc::tools::addTargetFlag(run, ropts.target, "the attention runs");
  attnc::tools::addArchFlag(run, ropts.arch, "whose code path and tiles the kernels take");
  run->add_option("--dtype", ropts.dtype, "--target cuda, cuda-sim: the kernels' element type")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))
      ->capture_default_str();
  run->add_option("--seed", ropts.seed, "seed of weights the weights file lacks")
      ->capture_default_str();
  attnc::driver::InputsOptions iopts;
  CLI::App *inputsCmd = app.add_subcommand(
      "inputs", "Write random inputs for attnc run and attnc-rt run: q, k, v (standard normal, "
                "f32), and key lengths and dout when asked");
  inputsCmd->add_option("--shape", iopts.shape, "B,H,N,D: batch, heads, sequence, head dim")
      ->delimiter(',')
      ->expected(4)
      ->required();
  inputsCmd->add_option("-o,--output", iopts.output, "the safetensors file of q, k, v (--inputs)")
      ->required();
  inputsCmd->add_option("--grad", iopts.grad, "also write dout here (for run's --grad)");
  inputsCmd->add_flag("--lengths", iopts.lengths,
                      "also key lengths [B] i32, drawn in [1, N] (variable-length batches)");
  inputsCmd->add_option("--seed", iopts.seed, "the draws' seed (the same files everywhere)")
      ->capture_default_str();
  attnc::driver::TrainCliOptions topts;
  CLI::App *trainCmd = app.add_subcommand(
      "train", "Train a spec's model: on the CPU in fp32, or with --target cuda on a GPU");
  CLI::App *evalCmd =
      app.add_subcommand("eval", "Evaluate the latest checkpoint of a training run");
  for (CLI::App *sub : {trainCmd, evalCmd}) {
    sub->add_option("spec", topts.spec, "the .attn spec file")->required();
    sub->add_option("--model", topts.run.model, "which model of the spec (default: the only one)");
    CLI::Option *data = sub->add_option(
        "--data", topts.run.data,
        sub == trainCmd ? "synthetic:duplicate, or text files / directories (':'-separated)"
                        : "synthetic:duplicate, or text files / directories (':'-separated) "
                          "(default: the run's, as its checkpoint records it)");
    if (sub == trainCmd)
      data->required();
    sub->add_option("--out", topts.run.out,
                    "run directory: checkpoints, train.csv, eval.csv, loss.svg")
        ->capture_default_str();
    sub->add_option("--batch", topts.batch,
                    sub == trainCmd ? "sequences per step (default: the model's train block, "
                                      "else 8)"
                                    : "sequences per evaluation batch (default: the "
                                      "run's batch, as its checkpoint records it)")
        ->check(CLI::Range(1, 1 << 16));
    sub->add_option("--seed", topts.run.seed, "seed of the weights and the data order")
        ->capture_default_str();
    sub->add_option("--eval-batches", topts.run.evalBatches,
                    sub == trainCmd ? "batches per evaluation (default 8)"
                                    : "batches per evaluation (default: the run's, else 8)")
        ->check(CLI::Range(1, 1 << 20));
    attnc::tools::addTargetFlag(
        sub, topts.target, sub == trainCmd ? "the training step runs" : "the model runs",
        sub == trainCmd ? "cuda-sim: the compiled CUDA step, its kernels on "
                          "the emulator (checks it without a GPU; slow)"
                        : "eval runs on the CPU");
  }
  attnc::tools::addTrainSettingFlags(trainCmd, topts.run.flags);
  attnc::tools::addDataParallelFlags(trainCmd, topts.run.parallel);
  trainCmd
      ->add_option("--precision", topts.run.precision,
                   "--target cuda: the GEMMs' compute precision (fp32 storage and master "
                   "weights; fp16 with dynamic loss scaling); auto: the model's dtype, "
                   "which the GPU's attention kernels use too")
      ->check(CLI::IsMember({"auto", "f32", "tf32", "bf16", "fp16"}))
      ->capture_default_str();
  trainCmd
      ->add_option("--loss-scale", topts.run.lossScale,
                   "--precision fp16: the initial loss scale (default 65536; halved on "
                   "overflow, doubled after 2000 good steps, at most 2^24)")
      ->check(CLI::PositiveNumber);
  attnc::tools::addRunFlags(trainCmd, topts.run.checkpointEvery, topts.run.resume,
                            topts.run.stopAfter, topts.run.initFrom);
  trainCmd
      ->add_option("--grad-check", topts.gradCheck,
                   "instead of training: finite-difference N coordinates of every "
                   "parameter tensor on one batch")
      ->check(CLI::Range(1, 1000));
  trainCmd->add_option("--grad-check-eps", topts.gradCheckEps, "finite-difference step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  trainCmd->add_option("--grad-check-tol", topts.gradCheckTol, "largest relative error")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  trainCmd
      ->add_option("--engine", topts.run.engine,
                   "kept for scripts: cuda-sim is --target cuda-sim; compiled (the default) "
                   "is the step compiled for --target")
      ->check(CLI::IsMember({"compiled", "cuda-sim"}))
      ->capture_default_str();
  trainCmd->add_flag("--host-attention", topts.run.hostAttention,
                     "--target cuda / cuda-sim: attention through the host (operands "
                     "downloaded, results uploaded each call) instead of the f32 dense and LSH "
                     "kernels on the step's own buffers");
  trainCmd
      ->add_option("--optimizer", topts.optimizer,
                   "--target cuda / cuda-sim: device (AdamW on the device, the "
                   "parameters stay there) or host (the CPU AdamW on downloaded "
                   "gradients, parameters uploaded each step)")
      ->check(CLI::IsMember({"device", "host"}))
      ->capture_default_str();
  trainCmd->add_flag("!--no-recompute", topts.recomputeLayers,
                     "compiled engine: keep every standard layer's activations for the "
                     "backward instead of recomputing each layer from its input (faster, "
                     "more memory)");

  CLI::App *generateCmd =
      app.add_subcommand("generate", "Continue a prompt with a trained causal model");
  CLI::App *fillCmd = app.add_subcommand("fill", "Fill masked bytes with a trained masked model");
  for (CLI::App *sub : {generateCmd, fillCmd}) {
    sub->add_option("spec", topts.spec, "the .attn spec file")->required();
    sub->add_option("--model", topts.run.model, "which model of the spec (default: the only one)");
    sub->add_option("--out", topts.run.out, "the training run directory (its latest checkpoint)")
        ->capture_default_str();
    sub->add_option("--seed", topts.run.seed, "sampling seed")->capture_default_str();
  }
  generateCmd->add_option("--prompt", topts.prompt, "the text to continue");
  generateCmd->add_option("--bytes", topts.bytes, "bytes to generate")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  generateCmd->add_option("--temperature", topts.temperature, "sampling temperature (0: greedy)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  fillCmd->add_option("--text", topts.text, "text with masked bytes")->required();
  fillCmd->add_option("--mask-char", topts.maskChar, "the byte that marks a masked position")
      ->capture_default_str();

  attnc::driver::TuneOptions tuneOpts;
  CLI::App *tuneCmd = app.add_subcommand(
      "tune",
      "Measure a spec's kernel choices on this machine into the tuning database: attention "
      "tiles and FFN chunks, or with --max-error low-rank k / LSH rounds by an error budget");
  tuneCmd->add_option("spec", tuneOpts.spec, "the .attn spec file");
  tuneCmd->add_option("--model", tuneOpts.model, "only this model of the spec");
  attnc::tools::addTargetFlag(tuneCmd, tuneOpts.target, "the kernels are measured",
                              "cuda without a GPU compiles and checks the configs (exit 2), "
                              "and for LSH models prints the performance model's prediction "
                              "per chunk (32, 64, 128); cuda-sim is refused: the emulator has "
                              "no speed to measure");
  tuneCmd->add_option("--db", tuneOpts.db,
                      "tuning database (default: $ATTNC_TUNING_DB, else the user cache)");
  tuneCmd
      ->add_option("--budget", tuneOpts.budget,
                   "seconds of measuring (a rerun continues; the cost model's first candidate is "
                   "always measured)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  tuneCmd->add_option("--batch", tuneOpts.batch, "batch of the measured shape")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  tuneCmd->add_option("--repeats", tuneOpts.repeats, "timed repeats per measurement (median)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  tuneCmd->add_flag("--show", tuneOpts.show, "list the database instead of tuning");
  tuneCmd
      ->add_option("--max-workspace-kib", tuneOpts.maxWorkspaceKib,
                   "CPU: drop tiles whose per-thread workspace exceeds this (KiB)")
      ->check(CLI::NonNegativeNumber);
  tuneCmd
      ->add_option("-j,--jobs", tuneOpts.jobs,
                   "candidates compiled in parallel (default: one per CPU)")
      ->check(CLI::NonNegativeNumber);
  tuneCmd
      ->add_option("--max-error", tuneOpts.maxError,
                   "choose k / LSH rounds and chunk: the fastest whose relative error "
                   "against exact attention is at most this")
      ->check(CLI::PositiveNumber);
  tuneCmd->add_option("--checkpoint", tuneOpts.checkpoint,
                      "--max-error (LSH): calibrate on this trained run's attention inputs");
  tuneCmd->add_option("--data", tuneOpts.data,
                      "--checkpoint: the data the run was trained on (FILE|synthetic:duplicate)");
  attnc::tools::addArchFlag(tuneCmd, tuneOpts.arch, "whose limits apply");
  tuneCmd
      ->add_option("--smem-limit", tuneOpts.smemLimit,
                   "CUDA: shared memory per block in bytes (default: the arch's)")
      ->check(CLI::NonNegativeNumber);

  attnc::driver::PlotCliOptions plotOpts;
  CLI::App *plotCmd = app.add_subcommand(
      "plot", "Draw training runs side by side: held-out loss per evaluation, training loss");
  plotCmd->add_option("runs", plotOpts.runs, "run directories (attnc train --out)")->required();
  plotCmd->add_option("-o,--output", plotOpts.output, "the SVG to write")->capture_default_str();
  plotCmd->add_option("--labels", plotOpts.labels, "a legend label per run (default: its name)")
      ->delimiter(',');
  plotCmd->add_option("--title", plotOpts.title, "the plot's title");
  plotCmd
      ->add_option("--what", plotOpts.what,
                   "held-out (eval.csv), training (train.csv, smoothed) or both")
      ->check(CLI::IsMember({"held-out", "training", "both"}))
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success &e) { // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError &e) {
    app.exit(e);
    return kExitInput; // usage errors are input errors
  }

  if (compile->parsed())
    return exitCode(attnc::driver::runCompile(copts));
  if (inputsCmd->parsed())
    return exitCode(attnc::driver::writeRandomInputs(iopts));
  if (run->parsed())
    return exitCode(attnc::driver::runAttention(ropts));
  if (bench->parsed())
    return exitCode(attnc::driver::runBench(bopts));
  if (perfCmd->parsed()) {
    if (!perfShape.empty())
      popts.batch = perfShape[0], popts.heads = perfShape[1], popts.seqLen = perfShape[2];
    return exitCode(attnc::driver::runPerf(popts));
  }
  if (trainCmd->parsed()) {
    if (trainCmd->count("--batch")) // else the model's train block decides
      topts.run.flags.batch = topts.batch;
    if (attnc::dist::world().size() == 1)
      topts.run.stop = attnc::tools::stopOnInterrupt("attnc train");
    return attnc::tools::runAsRank([&] { return exitCode(attnc::driver::runTrain(topts)); });
  }
  if (evalCmd->parsed()) {
    topts.batchGiven = evalCmd->count("--batch") > 0;
    topts.evalBatchesGiven = evalCmd->count("--eval-batches") > 0;
    return exitCode(attnc::driver::runEval(topts));
  }
  if (tuneCmd->parsed()) {
    if (tuneOpts.spec.empty() && !tuneOpts.show) {
      std::cerr << "attnc tune: a spec is needed (or --show)\n";
      return kExitInput;
    }
    return exitCode(attnc::driver::runTune(tuneOpts));
  }
  if (plotCmd->parsed())
    return exitCode(attnc::driver::runPlot(plotOpts));
  if (generateCmd->parsed())
    return exitCode(attnc::driver::runGenerate(topts));
  if (fillCmd->parsed())
    return exitCode(attnc::driver::runFill(topts));
  return kExitInput;
}
