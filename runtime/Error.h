//===- Error.h - Result values of the runtime API ---------------*- C++ -*-===//
//
// The runtime may throw inside its own code, but nothing it throws crosses
// its API: every fallible public function returns an `Expected<T>` (a value
// or an `Error` with a message meant for a person), and `Status`
// (`Expected<void>`) where there is no value. Messages are complete
// sentences' worth of context: they name the thing that failed (kernel,
// program, file, symbol) and carry compiler logs where there are any, so
// callers print them as they are.
//
// Warnings (a degraded cache, a corrupt cache entry) are not errors: they go
// to a `WarningHandler`, by default one line on stderr.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_ERROR_H
#define ATTNC_RUNTIME_ERROR_H

#include <cassert>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <variant>

namespace attnc {

/// A failure: what went wrong, for a person to read.
struct Error {
  std::string message;
};

/// Builds an Error; `return makeError("x failed: " + why);`.
inline Error makeError(std::string message) { return Error{std::move(message)}; }

/// Either a `T` or an `Error`. Test it before use:
/// \code
///   Expected<Cubin> c = compiler.compile(...);
///   if (!c) { report(c.error()); return; }
///   use(*c);
/// \endcode
template <typename T> class [[nodiscard]] Expected {
public:
  Expected(T value) : v_(std::move(value)) {}
  Expected(Error error) : v_(std::move(error)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T &value() & {
    assert(ok() && "value() of a failed Expected");
    return std::get<0>(v_);
  }
  const T &value() const & {
    assert(ok() && "value() of a failed Expected");
    return std::get<0>(v_);
  }
  /// Moves the value out (for move-only T such as loaded modules).
  T take() && { return std::move(value()); }
  T &operator*() & { return value(); }
  const T &operator*() const & { return value(); }
  T *operator->() { return &value(); }
  const T *operator->() const { return &value(); }

  /// The failure's message; empty when ok().
  const std::string &error() const {
    static const std::string kNone;
    return ok() ? kNone : std::get<1>(v_).message;
  }
  /// The Error itself, to pass a failure on: `if (!x) return x.takeError();`.
  Error takeError() const { return Error{error()}; }

private:
  std::variant<T, Error> v_;
};

/// Success or an Error, for operations without a result value.
template <> class [[nodiscard]] Expected<void> {
public:
  Expected() = default;
  Expected(Error error) : ok_(false), message_(std::move(error.message)) {}

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const std::string &error() const { return message_; }
  Error takeError() const { return Error{message_}; }

private:
  bool ok_ = true;
  std::string message_;
};

using Status = Expected<void>;

/// Where runtime warnings go. The message has no "warning:" prefix and no
/// trailing newline.
using WarningHandler = std::function<void(const std::string &)>;

/// Writes "attnc: warning: MESSAGE" to stderr.
void printWarning(const std::string &message);

/// `*stream`, or a stream that drops what it is given when `stream` is
/// null: how the runtime writes the progress and notes a caller asked for
/// (options' `log`), without ever choosing stderr itself.
std::ostream &streamOrNull(std::ostream *stream);

} // namespace attnc

#endif // ATTNC_RUNTIME_ERROR_H
