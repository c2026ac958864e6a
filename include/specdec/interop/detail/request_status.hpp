//! \file
//! The request_status contract the interop batch entry points share
//! (interop/results.hpp, interop/sglang_build_tree.hpp,
//! interop/sglang_verify.hpp): an empty span stops at the first failing
//! request and returns its status (index = request); otherwise num_requests
//! entries receive each request's code and the call goes on, as the CUDA
//! twins do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/core/status.hpp"

namespace specdec::detail {

//! size_mismatch when request_status is neither empty nor batch entries long.
inline status check_request_status(std::span<const status_code> request_status, std::int32_t batch) noexcept {
  if (!request_status.empty() && request_status.size() < static_cast<std::size_t>(batch))
    return make_status(status_code::size_mismatch, "request_status needs num_requests entries");
  return status::success();
}

//! Runs `request(r)` (returning a status) for r in [0, batch): raises the
//! first failure (index r) when request_status is empty, else records every
//! request's code and goes on.
template <class Request>
status raise_or_record(std::int32_t batch, std::span<status_code> request_status, const Request& request) {
  for (std::int32_t r = 0; r < batch; ++r) {
    const status st = request(r);
    if (request_status.empty()) {
      if (!st.ok()) return make_status(st.code(), st.message(), r);
    } else {
      request_status[static_cast<std::size_t>(r)] = st.code();
    }
  }
  return status::success();
}

}  // namespace specdec::detail
