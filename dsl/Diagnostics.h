//===- Diagnostics.h - Located error reporting for .attn specs -*- C++ -*-===//
//
// The front end never throws and never aborts on bad input: every problem is
// reported here as `file:line:col: error: message` followed by the offending
// source line (truncated, so a 10 MB one-line file does not flood the terminal)
// and a caret.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_DSL_DIAGNOSTICS_H
#define ATTNC_DSL_DIAGNOSTICS_H

#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace attnc {

/// A position in a spec file; line and column are 1-based.
struct SourceLoc {
  std::shared_ptr<const std::string> file;
  unsigned line = 0;
  unsigned col = 0;

  std::string str() const;
};

/// Collects errors and warnings against one source buffer.
class DiagnosticEngine {
public:
  DiagnosticEngine(std::string_view buffer, std::ostream &os) : buffer(buffer), os(os) {}

  void error(const SourceLoc &loc, const std::string &message);
  void warning(const SourceLoc &loc, const std::string &message);
  void note(const SourceLoc &loc, const std::string &message);

  unsigned numErrors() const { return errors; }
  bool hasErrors() const { return errors != 0; }
  /// Stop reporting after this many errors (the rest would be noise).
  static constexpr unsigned kMaxErrors = 20;

private:
  void emit(const char *kind, const SourceLoc &loc, const std::string &msg);
  std::string_view buffer;
  std::ostream &os;
  unsigned errors = 0;
};

} // namespace attnc

#endif // ATTNC_DSL_DIAGNOSTICS_H
