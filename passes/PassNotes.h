//===- PassNotes.h - Where passes write their plain-text notes -*- C++ -*-===//
//
// attn-apply-tuning says, with `report`, which tuning entry each tunable
// took or why none applied, as "attnc: ..." lines (docs/tuning.md). Those
// go to passNotes(): llvm::errs() for attnc-opt, or the stream a caller on
// this thread installed with ScopedPassNotes. The driver installs its
// Reporter's (driver/Report.h), so a library call (a Session, the C ABI)
// prints nothing of its own.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_PASSES_PASSNOTES_H
#define ATTNC_PASSES_PASSNOTES_H

#include "llvm/Support/raw_ostream.h"

namespace attnc {

/// This thread's stream for pass notes.
llvm::raw_ostream &passNotes();

/// Sends this thread's pass notes to `os` until the scope ends.
class ScopedPassNotes {
public:
  explicit ScopedPassNotes(llvm::raw_ostream &os);
  ~ScopedPassNotes();
  ScopedPassNotes(const ScopedPassNotes &) = delete;
  ScopedPassNotes &operator=(const ScopedPassNotes &) = delete;

private:
  llvm::raw_ostream *previous_;
};

} // namespace attnc

#endif // ATTNC_PASSES_PASSNOTES_H
