//===- Sema.h - Semantic checks of .attn specs ------------------*- C++ -*-===//
//
// Name resolution, expression typing and value checks. Everything the dialect
// verifiers would reject is caught here first, so users see the spec's
// `file:line:col` rather than an IR dump.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_DSL_SEMA_H
#define ATTNC_DSL_SEMA_H

#include "dsl/AST.h"

namespace attnc {

/// Checks `spec`, fills in expression types and defaults (d_ff, shared QK for
/// LSH). Returns false when any error was reported.
bool checkSpec(ast::Spec &spec, DiagnosticEngine &diag);

/// The functions a score or mask expression may call.
bool isBuiltinFunction(const std::string &name);

} // namespace attnc

#endif // ATTNC_DSL_SEMA_H
