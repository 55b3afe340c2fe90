// Errors carry file, line and the failing call or condition.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace tessera {

/// Base exception of Tessera. `what()` is a message a user can act on.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

/// Bad input (files, options): the user must fix the input, not the code.
class InputError : public Error {
 public:
  explicit InputError(const std::string& msg) : Error(msg) {}
};

/// An error already agreed on by every rank of a communicator (see
/// comm::raise_collectively). The driver exits cleanly instead of aborting.
class CollectiveError : public Error {
 public:
  explicit CollectiveError(const std::string& msg) : Error(msg) {}
};

namespace detail {
[[noreturn]] inline void throw_error(const char* file, int line, const std::string& what) {
  std::ostringstream os;
  os << what << " [" << file << ":" << line << "]";
  throw Error(os.str());
}
[[noreturn]] inline void throw_input(const std::string& what) {
  throw InputError(what);
}
}  // namespace detail

}  // namespace tessera

/// Precondition the caller must satisfy; `msg` says what to fix.
#define TESSERA_EXPECTS(cond, msg)                                                                 \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::ostringstream tessera_os_;                                                              \
      tessera_os_ << msg;                                                                          \
      ::tessera::detail::throw_error(__FILE__, __LINE__,                                           \
                                     std::string("expected ") + #cond + ": " + tessera_os_.str()); \
    }                                                                                              \
  } while (0)

/// Input validation: throws InputError with a message for the user (no source location).
#define TESSERA_INPUT_CHECK(cond, msg)                   \
  do {                                                   \
    if (!(cond)) {                                       \
      std::ostringstream tessera_os_;                    \
      tessera_os_ << msg;                                \
      ::tessera::detail::throw_input(tessera_os_.str()); \
    }                                                    \
  } while (0)

#define TESSERA_THROW(msg)                                                 \
  do {                                                                     \
    std::ostringstream tessera_os_;                                        \
    tessera_os_ << msg;                                                    \
    ::tessera::detail::throw_error(__FILE__, __LINE__, tessera_os_.str()); \
  } while (0)
