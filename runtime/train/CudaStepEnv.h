//===- CudaStepEnv.h - Filling a CUDA step's env -----------------*- C++ -*-===//
//
// The GPU and the emulated engines of CompiledStep lend the generated CUDA
// step the same env shape with different services: `Env` is a struct of
// static callbacks named as attnc_cuda_env's fields.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_CUDASTEPENV_H
#define ATTNC_RUNTIME_TRAIN_CUDASTEPENV_H

#include "codegen/cuda/include/attnc/model_step_env.h"

namespace attnc::train {

template <class Env> attnc_cuda_env cudaStepEnv(void *ctx) {
  attnc_cuda_env env{};
  env.ctx = ctx;
  env.launch = Env::launch;
  env.gemm = Env::gemm;
  env.attention = Env::attention;
  env.attention_grad = Env::attentionGrad;
  env.check_finite = Env::checkFinite;
  env.copy = Env::copy;
  env.zero = Env::zero;
  env.read = Env::read;
  env.scratch = Env::scratch;
  return env;
}

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_CUDASTEPENV_H
