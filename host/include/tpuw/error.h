// One error type for the whole host stack: every failure is a tpuw::Error with a kind (which
// decides the CLI's exit code) and a message that says what was wrong and where.
#pragma once

#include <stdexcept>
#include <string>

namespace tpuw {

enum class ErrorKind {
  kInvalidArgument,  // bad option, shape, or value supplied by the caller (CLI exit 2)
  kBadFile,          // malformed, truncated or wrong-type input file (CLI exit 2)
  kAsmSyntax,        // assembly source error, with file:line (CLI exit 2)
  kDeviceFault,      // the device stopped on a fault (cause, PC, info in the message)
  kTimeout,          // the device did not answer in time
  kMismatch,         // --check found a difference between backends
  kUnsupported,      // valid request the implementation cannot do (CLI exit 2)
  kCancelled,        // queued work dropped by a shutdown before it ran
  kResource,         // out of memory, threads or disk space (the message names which; CLI exit 1)
  kInternal,         // a bug: an invariant did not hold
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace tpuw
