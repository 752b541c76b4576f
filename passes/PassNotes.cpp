//===- PassNotes.cpp - Where passes write their plain-text notes ----------===//
#include "passes/PassNotes.h"

namespace attnc {

namespace {
// The module passes that write notes run on the thread that runs the pass
// manager, so a thread-local stream reaches them.
thread_local llvm::raw_ostream *current = nullptr;
} // namespace

llvm::raw_ostream &passNotes() { return current ? *current : llvm::errs(); }

ScopedPassNotes::ScopedPassNotes(llvm::raw_ostream &os) : previous_(current) { current = &os; }

ScopedPassNotes::~ScopedPassNotes() {
  current->flush();
  current = previous_;
}

} // namespace attnc
