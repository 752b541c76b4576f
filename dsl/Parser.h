//===- Parser.h - Recursive-descent parser for .attn specs ------*- C++ -*-===//
//
// Grammar (docs/language.md has the full reference with examples):
//
//   spec      ::= (attention | model | ';')* EOF
//   attention ::= 'attention' IDENT '{' attn-item* '}'
//   model     ::= 'model' IDENT '{' model-item* '}'
//   expr      ::= ternary over || && == != < <= > >= + - * / % unary - !
//
// The parser stops at the first syntax error (reported with its location);
// semantic checks (names, types, value ranges) are Sema's.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_DSL_PARSER_H
#define ATTNC_DSL_PARSER_H

#include "dsl/AST.h"
#include "dsl/Lexer.h"

#include <optional>

namespace attnc {

class Parser {
public:
  /// Expressions deeper than this are rejected, which bounds the recursion of
  /// every later phase (a deeply nested spec must not overflow the stack).
  static constexpr unsigned kMaxExprDepth = 256;

  Parser(Lexer &lexer, DiagnosticEngine &diag) : lexer(lexer), diag(diag) {
    tok = lexer.next();
    if (tok.kind == Tok::Error)
      failed = true;
  }

  /// Parses a whole spec; returns std::nullopt after reporting an error.
  std::optional<ast::Spec> parseSpec();

private:
  /// A `key = value` argument of lowrank(...), lsh(...), tile(...), ffn(...).
  struct Arg {
    std::string key;
    SourceLoc keyLoc;
    Token value;
  };

  void consume();
  bool expect(Tok kind, const char *what);
  bool expectKeyword(std::string_view word);
  bool isKeyword(std::string_view word) const { return tok.kind == Tok::Ident && tok.text == word; }
  bool error(const SourceLoc &loc, const std::string &msg);
  bool errorExpected(const std::string &what);
  std::string describe(const Token &t) const;

  bool parseAttention(ast::Spec &spec);
  bool parseModel(ast::Spec &spec);
  bool parseLayer(ast::ModelDecl &model);
  bool parseTrain(ast::ModelDecl &model);
  bool parseArgs(std::vector<Arg> &args);
  bool parseNumber(double &out, const char *what);
  bool parseInt(int64_t &out, const char *what);
  bool parseDropout(const SourceLoc &loc, double &out);

  // Argument helpers: validate one `key = value` against the expected kind.
  bool argTunable(const Arg &a, ast::Tunable &out);
  bool argInt(const Arg &a, int64_t &out);
  bool argBool(const Arg &a, bool &out);
  bool unknownArg(const Arg &a, const char *construct, const char *allowed);

  ast::ExprPtr parseExpr();
  ast::ExprPtr parseTernary();
  ast::ExprPtr parseBinary(int minPrec);
  ast::ExprPtr parseUnary();
  ast::ExprPtr parsePrimary();
  /// Counts one level of expression nesting; false (after reporting) past
  /// kMaxExprDepth. The caller decrements `nesting` when done.
  bool enterNesting(const SourceLoc &loc);
  static std::string tooDeep();
  ast::ExprPtr makeNode(ast::ExprKind kind, SourceLoc loc, std::string name,
                        std::vector<ast::ExprPtr> args);

  Lexer &lexer;
  DiagnosticEngine &diag;
  Token tok;
  bool failed = false;
  unsigned nesting = 0;
};

/// Reads, parses and checks a spec held in `buffer`. Returns std::nullopt when
/// any error was reported to `diag`.
std::optional<ast::Spec> parseAndCheck(std::string_view buffer, const std::string &filename,
                                       DiagnosticEngine &diag);

} // namespace attnc

#endif // ATTNC_DSL_PARSER_H
