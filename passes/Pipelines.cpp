//===- Pipelines.cpp - attnc's pass pipelines as library functions --------===//
#include "passes/Pipelines.h"

#include "passes/Passes.h"

#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

namespace attnc {

void populateResolvePipeline(OpPassManager &pm, const ResolvePipelineOptions &o) {
  if (!o.tuningDb.empty() || !o.runChoices.empty()) {
    ApplyTuningOptions tuning;
    tuning.db = o.tuningDb;
    tuning.target = o.target;
    tuning.arch = o.arch;
    tuning.device = o.device;
    tuning.toolchain = o.toolchain;
    tuning.cudaToolchain = o.cudaToolchain;
    tuning.accuracy = o.tuneAccuracy;
    tuning.runChoices = o.runChoices;
    tuning.report = o.report;
    pm.addPass(createApplyTuning(tuning));
  }
  ResolveTunablesOptions resolve;
  resolve.report = o.report;
  pm.addPass(createResolveTunables(resolve));
}

void populateKernelPipeline(OpPassManager &pm, const KernelPipelineOptions &o) {
  ExpandLshOptions lsh;
  lsh.report = o.reportLsh;
  pm.addPass(createExpandLsh(lsh));
  pm.addPass(createLowerAttention());
  pm.addPass(createLowRankOrder());
  pm.addPass(createFuseAttention());
  pm.addPass(createFuseLsh());
  pm.addNestedPass<func::FuncOp>(createDeriveBackward());
  pm.addPass(createKeyBand());
  TileAttentionOptions tile;
  tile.target = o.target;
  tile.arch = o.arch;
  pm.addPass(createTileAttention(tile));
}

void populateModelStepPipeline(OpPassManager &pm, const ModelStepPipelineOptions &o) {
  ExpandModelOptions expand;
  expand.batch = o.batch;
  expand.train = o.train;
  expand.infer = o.infer;
  expand.inferBatch = o.inferBatch;
  pm.addPass(createExpandModel(expand));
  DeriveModelBackwardOptions derive;
  derive.recomputeLayers = o.recomputeLayers;
  pm.addPass(createDeriveModelBackward(derive));
  FuseRowsOptions fuse;
  fuse.inChunks = o.fuseInChunks;
  pm.addPass(createFuseRows(fuse));
  pm.addPass(createPlanMemory());
}

namespace {

// The command-line spellings of the options structs (attnc-opt).

struct ResolvePipelineCl : public PassPipelineOptions<ResolvePipelineCl> {
  Option<std::string> db{*this, "db",
                         llvm::cl::desc("tuning database to apply first (none: "
                                        "heuristics only)")};
  Option<std::string> target{*this, "target", llvm::cl::desc("cpu or cuda entries"),
                             llvm::cl::init("cpu")};
  Option<std::string> arch{*this, "arch", llvm::cl::desc("cuda: the GPU architecture"),
                           llvm::cl::init("sm_80")};
  Option<std::string> device{*this, "device",
                             llvm::cl::desc("cpu: the device id (default: "
                                            "this machine's)")};
  Option<std::string> toolchain{*this, "toolchain",
                                llvm::cl::desc("cpu: the host compiler's toolchain id")};
  Option<std::string> cudaToolchain{*this, "cuda-toolchain",
                                    llvm::cl::desc("cuda: the NVRTC toolchain id")};
  Option<bool> report{*this, "report", llvm::cl::desc("say what was chosen"),
                      llvm::cl::init(false)};
  ListOption<std::string> runChoices{*this, "run-choices",
                                     llvm::cl::desc("a run folder's pinned choices (KEY=N, "
                                                    "model=NAME), before the database")};
};

struct KernelPipelineCl : public PassPipelineOptions<KernelPipelineCl> {
  Option<std::string> target{*this, "target", llvm::cl::desc("cuda or cpu"),
                             llvm::cl::init("cuda")};
  Option<std::string> arch{*this, "arch", llvm::cl::desc("the CUDA architecture"),
                           llvm::cl::init("sm_80")};
  Option<bool> reportLsh{*this, "report-lsh", llvm::cl::desc("remark when LSH falls back to dense"),
                         llvm::cl::init(false)};
};

struct ModelStepPipelineCl : public PassPipelineOptions<ModelStepPipelineCl> {
  Option<int64_t> batch{*this, "batch", llvm::cl::desc("sequences per step"), llvm::cl::init(1)};
  Option<bool> train{*this, "train", llvm::cl::desc("add the training step @train_<model>"),
                     llvm::cl::init(true)};
  Option<bool> infer{*this, "infer", llvm::cl::desc("add the inference function @infer_<model>"),
                     llvm::cl::init(true)};
  Option<int64_t> inferBatch{*this, "infer-batch",
                             llvm::cl::desc("sequences per inference call (0: batch)"),
                             llvm::cl::init(0)};
  Option<bool> recomputeLayers{*this, "recompute-layers",
                               llvm::cl::desc("recompute standard layers in the backward"),
                               llvm::cl::init(false)};
  Option<bool> fuseInChunks{*this, "fuse-in-chunks",
                            llvm::cl::desc("fuse row chains inside chunked FFN bodies"),
                            llvm::cl::init(true)};
};

} // namespace

void registerAttnPipelines() {
  PassPipelineRegistration<ResolvePipelineCl>(
      "attn-resolve-pipeline",
      "attn-apply-tuning (with db=) then attn-resolve-tunables: every auto tunable a number",
      [](OpPassManager &pm, const ResolvePipelineCl &cl) {
        ResolvePipelineOptions o;
        o.tuningDb = cl.db, o.target = cl.target, o.arch = cl.arch, o.device = cl.device;
        o.runChoices.assign(cl.runChoices.begin(), cl.runChoices.end());
        o.toolchain = cl.toolchain, o.cudaToolchain = cl.cudaToolchain, o.report = cl.report;
        populateResolvePipeline(pm, o);
      });
  PassPipelineRegistration<KernelPipelineCl>(
      "attn-kernel-pipeline",
      "attention functions to tiled kernel ops (expand LSH, lower, low-rank order, fuse, "
      "derive the backward, key bands, tile)",
      [](OpPassManager &pm, const KernelPipelineCl &cl) {
        KernelPipelineOptions o;
        o.target = cl.target, o.arch = cl.arch, o.reportLsh = cl.reportLsh;
        populateKernelPipeline(pm, o);
      });
  PassPipelineRegistration<ModelStepPipelineCl>(
      "attn-model-step-pipeline",
      "a resolved model to its planned training step and inference function (expand, derive "
      "the backward, fuse rows, plan memory)",
      [](OpPassManager &pm, const ModelStepPipelineCl &cl) {
        ModelStepPipelineOptions o;
        o.batch = cl.batch, o.recomputeLayers = cl.recomputeLayers;
        o.train = cl.train, o.infer = cl.infer, o.inferBatch = cl.inferBatch;
        o.fuseInChunks = cl.fuseInChunks;
        populateModelStepPipeline(pm, o);
      });
}

} // namespace attnc
