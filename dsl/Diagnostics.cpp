//===- Diagnostics.cpp - Located error reporting --------------------------===//
#include "dsl/Diagnostics.h"

namespace attnc {

std::string SourceLoc::str() const {
  return (file ? *file : std::string("<unknown>")) + ":" + std::to_string(line) + ":" +
         std::to_string(col);
}

/// Returns the text of line `line` (1-based) of `buffer`, or "" when the
/// buffer has fewer lines.
static std::string_view lineText(std::string_view buffer, unsigned line) {
  size_t start = 0;
  for (unsigned l = 1; l < line; ++l) {
    size_t nl = buffer.find('\n', start);
    if (nl == std::string_view::npos)
      return {};
    start = nl + 1;
  }
  size_t end = buffer.find('\n', start);
  if (end == std::string_view::npos)
    end = buffer.size();
  return buffer.substr(start, end - start);
}

void DiagnosticEngine::emit(const char *kind, const SourceLoc &loc, const std::string &msg) {
  os << loc.str() << ": " << kind << ": " << msg << "\n";
  if (loc.line == 0)
    return;
  // Show a window of at most 100 printable characters around the column.
  std::string_view text = lineText(buffer, loc.line);
  size_t col = loc.col ? loc.col - 1 : 0;
  size_t begin = col > 60 ? col - 60 : 0;
  std::string shown;
  for (size_t i = begin; i < text.size() && shown.size() < 100; ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    shown.push_back(c == '\t' ? ' ' : (c < 0x20 || c >= 0x7f) ? '?' : c);
  }
  os << "  " << shown << "\n  " << std::string(col - begin, ' ') << "^\n";
}

void DiagnosticEngine::error(const SourceLoc &loc, const std::string &msg) {
  ++errors;
  if (errors <= kMaxErrors)
    emit("error", loc, msg);
  else if (errors == kMaxErrors + 1)
    os << "attnc: too many errors, stopping\n";
}

void DiagnosticEngine::warning(const SourceLoc &loc, const std::string &msg) {
  emit("warning", loc, msg);
}

void DiagnosticEngine::note(const SourceLoc &loc, const std::string &msg) {
  if (errors > kMaxErrors) // notes belong to errors no longer shown
    return;
  emit("note", loc, msg);
}

} // namespace attnc
