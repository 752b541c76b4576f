//===- attention.h - Every CPU attention kernel, in one include -*- C++ -*-===//
//
// The CPU family's umbrella: what a generated kernel unit (codegen's
// emitKernels) and a test of the whole family include. Each header below
// documents its own templates:
//
//   flash_fwd.h / flash_bwd.h  dense attention, FlashAttention-style tiles
//   lowrank.h                  Linformer's projections of K and V
//   lsh.h                      LSH (Reformer) attention, forward and backward
//   shared_qk.h                dense attention with shared QK (LSH's fallback)
//
// The emitted unit defines its variants after this include. What the
// headers read beyond it are the compile flags the JIT passes
// (ATTNC_USE_CBLAS, ATTNC_CPU_PORTABLE).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CPU_ATTENTION_H
#define ATTNC_CPU_ATTENTION_H

#include "flash_bwd.h"
#include "flash_fwd.h"
#include "lowrank.h"
#include "lsh.h"
#include "shared_qk.h"

#endif // ATTNC_CPU_ATTENTION_H
