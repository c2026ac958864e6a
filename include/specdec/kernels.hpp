//! \file
//! Host API of the compiled CUDA companion, `specdec::kernels` (link it from
//! CMake). Plain C++: no CUDA header is needed to include this file. Every
//! function takes device pointers inside a trivially copyable params struct,
//! a stream as `void*` (a cudaStream_t; null = default stream), and returns
//! a status; launches are asynchronous unless a function says otherwise.
#pragma once

#include "specdec/kernels/cache.hpp"
#include "specdec/kernels/draft.hpp"
#include "specdec/kernels/interop.hpp"
#include "specdec/kernels/runtime.hpp"
#include "specdec/kernels/ssm.hpp"
#include "specdec/kernels/tree.hpp"
#include "specdec/kernels/verify.hpp"
