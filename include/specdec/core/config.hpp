//! \file
//! Compiler and platform configuration: host/device annotations, version,
//! exception support. The only header that defines SPECDEC_* macros.
#pragma once

//! Major version of the headers.
#define SPECDEC_VERSION_MAJOR 0
//! Minor version of the headers.
#define SPECDEC_VERSION_MINOR 4
//! Patch version of the headers.
#define SPECDEC_VERSION_PATCH 0
//! Single integer version: major * 10000 + minor * 100 + patch.
#define SPECDEC_VERSION (SPECDEC_VERSION_MAJOR * 10000 + SPECDEC_VERSION_MINOR * 100 + SPECDEC_VERSION_PATCH)

#if defined(__CUDACC__)
//! Callable from host and device code, inline.
#define SPECDEC_HD __host__ __device__ inline
//! Device-only, inline.
#define SPECDEC_DEVICE __device__ inline
//! Device-only, compiled once as a called function instead of inlined at
//! every call site: the verification walk's row passes (cuda/verify.cuh),
//! which the walk calls from dozens of places per instantiation.
#define SPECDEC_DEVICE_OUTLINED __device__ __noinline__ inline
//! A kernel entry point.
#define SPECDEC_KERNEL __global__
//! Placed before a host-device template whose device instantiations call
//! device-only policies (the verification walk with the CUDA row policy).
#define SPECDEC_NO_EXEC_CHECK _Pragma("nv_exec_check_disable")
//! 1: compiled by nvcc.
#define SPECDEC_IS_DEVICE_COMPILER 1
#else
//! Host compilers: plain inline (the device annotations vanish).
#define SPECDEC_HD inline
//! Host compilers: plain inline.
#define SPECDEC_DEVICE inline
//! Host compilers: plain inline.
#define SPECDEC_DEVICE_OUTLINED inline
//! Host compilers: nothing.
#define SPECDEC_KERNEL
//! Host compilers: nothing.
#define SPECDEC_NO_EXEC_CHECK
//! 0: compiled by a host compiler.
#define SPECDEC_IS_DEVICE_COMPILER 0
#endif

#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
//! 1: exceptions are enabled; owning layers throw specdec::error.
#define SPECDEC_HAS_EXCEPTIONS 1
#else
//! 0: compiled with -fno-exceptions; owning layers abort instead of throwing.
#define SPECDEC_HAS_EXCEPTIONS 0
#endif

namespace specdec {

//! Version of the headers this translation unit was compiled against.
struct version_info {
  int major;  //!< major version
  int minor;  //!< minor version
  int patch;  //!< patch version
};

//! The header version as a value (constexpr; compare with the kernels library's).
constexpr version_info header_version() noexcept {
  return {SPECDEC_VERSION_MAJOR, SPECDEC_VERSION_MINOR, SPECDEC_VERSION_PATCH};
}

}  // namespace specdec
