//===- DropoutReference.h - Attention dropout of the test references -----===//
//
// The factor the double-precision references weight a probability with:
// 0 where kernels/abi/attnc/abi/Philox.h attentionKeep drops (row, i, j), else 1/(1 − p)
// computed in double, and 1 without dropout. Kernels key `row` by head row
// (dense, low-rank) or head row · rounds + round (LSH).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_TEST_UNIT_DROPOUTREFERENCE_H
#define ATTNC_TEST_UNIT_DROPOUTREFERENCE_H

#include "attnc/abi/Philox.h"

inline double refDropoutFactor(unsigned long long seed, unsigned offset, int row, int i, int j,
                               float p) {
  if (p <= 0)
    return 1.0;
  return attnc::philox::attentionKeep(seed, offset, row, i, j, p) ? 1.0 / (1.0 - double(p)) : 0.0;
}

#endif // ATTNC_TEST_UNIT_DROPOUTREFERENCE_H
