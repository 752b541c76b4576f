//===- host_lowrank.h - Entry points of the host-side low-rank projection -===//
//
// The low-rank projections around the GPU attention run on the host with the
// CPU kernels' own projection loops (attnc/lowrank.h). The runtime compiles
// this file alone, with the host compiler, as one shared object
// (runtime/CudaAttention.cpp, loadHostProjections).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CPU_ENTRIES_HOST_LOWRANK_H
#define ATTNC_CPU_ENTRIES_HOST_LOWRANK_H

#include "attnc/lowrank.h"
extern "C" int attnc_host_lowrank_project_fwd(const float *x, const float *e, float *xp,
                                              const int *lengths, int B, int H, int N, int D,
                                              int kProj, int Nmax, int perHead) {
  return attnc::cpu::lowrank_project_fwd(x, e, xp, lengths, B, H, N, D, kProj, Nmax, perHead != 0);
}
extern "C" int attnc_host_lowrank_project_bwd(const float *x, const float *e, const float *dxp,
                                              float *dx, float *de, const int *lengths, int B,
                                              int H, int N, int D, int kProj, int Nmax,
                                              int perHead) {
  return attnc::cpu::lowrank_project_bwd(x, e, dxp, dx, de, lengths, B, H, N, D, kProj, Nmax,
                                         perHead != 0);
}

#endif // ATTNC_CPU_ENTRIES_HOST_LOWRANK_H
