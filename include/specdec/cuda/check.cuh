//! \file
//! Turning CUDA runtime errors into specdec statuses (device-side templates
//! and the kernels library use this; never traps).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "specdec/core/status.hpp"
#include "specdec/core/workspace.hpp"

namespace specdec::cuda {

//! A status for a CUDA error code. The message is the runtime's own static
//! string, so it never dangles.
inline status from_cuda(cudaError_t e) noexcept {
  if (e == cudaSuccess) return status::success();
  return make_status(status_code::cuda_error, cudaGetErrorString(e), static_cast<std::int64_t>(e));
}

//! Status of the most recent launch on this thread. Peeks, never clears: an
//! error the engine had not read yet stays for the engine to read (it is
//! reported here too, since the runtime cannot tell whose launch it was).
inline status last_launch_status() noexcept { return from_cuda(cudaPeekAtLastError()); }

//! Checks a device workspace against the `need` bytes its entry point's
//! X_workspace_size gave: buffer_too_small (with `too_small`, a static
//! string naming that size function) when it is null or shorter,
//! invalid_argument when it is not 256-byte aligned. Nothing is checked
//! when nothing is needed.
inline status check_workspace(const void* workspace, std::size_t bytes, std::size_t need,
                              const char* too_small) noexcept {
  if (need == 0) return status::success();
  if (workspace == nullptr || bytes < need) return make_status(status_code::buffer_too_small, too_small);
  if (reinterpret_cast<std::uintptr_t>(workspace) % workspace_alignment != 0)
    return make_status(status_code::invalid_argument, "workspace must be 256-byte aligned");
  return status::success();
}

}  // namespace specdec::cuda
