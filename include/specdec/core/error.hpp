//! \file
//! The exception thrown by owning convenience layers, and the bridge from a
//! status to it. Builds with -fno-exceptions: failures then print and abort.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"

namespace specdec {

//! Exception carrying the status that caused it.
class error : public std::runtime_error {
 public:
  //! Wraps a failed status; what() names the code, message and index.
  explicit error(status s)
      : std::runtime_error(std::string(status_code_name(s.code())) + ": " + s.message() +
                           (s.index() >= 0 ? " (at index " + std::to_string(s.index()) + ")" : std::string())),
        status_(s) {}
  //! The status this exception was made from.
  status get_status() const noexcept { return status_; }
  //! The status code of the failure.
  status_code code() const noexcept { return status_.code(); }

 private:
  status status_;
};

//! Throws `specdec::error` for a failed status (or prints it and aborts when
//! exceptions are disabled). Does nothing for success.
inline void throw_if_error(status s) {
  if (s.ok()) return;
#if SPECDEC_HAS_EXCEPTIONS
  throw error(s);
#else
  std::fprintf(stderr, "specdec: %s: %s (index %lld)\n", status_code_name(s.code()), s.message(),
               static_cast<long long>(s.index()));
  std::abort();
#endif
}

}  // namespace specdec
