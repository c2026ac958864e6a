// specdec._core: the nanobind module. Low-level entry points that write
// into caller arrays; the Python package (specdec/<area>.py, re-exported by
// specdec/__init__.py) adds the allocating conveniences and the docstrings.
#include <cstdint>

#include "build_info.hpp"
#include "common.hpp"
#include "common_cuda.hpp"
#include "specdec/core/config.hpp"
#include "specdec/core/detail/simd.hpp"
#include "specdec/core/status.hpp"
#if defined(SPECDEC_PYTHON_HAS_CUDA)
#include "specdec/kernels/runtime.hpp"
#endif

NB_MODULE(_core, m) {
  namespace nb = nanobind;
  using specdec::python::error;
  nb::exception<error>(m, "Error", PyExc_ValueError);
#if defined(SPECDEC_PYTHON_HAS_CUDA)
  m.attr("has_cuda") = true;
  m.attr("cuda_archs") = SPECDEC_PYTHON_CUDA_ARCHS;
#else
  m.attr("has_cuda") = false;
  m.attr("cuda_archs") = "";
#endif
  m.attr("build") = SPECDEC_PYTHON_BUILD;
  // Bytes per host vector of the SSM kernels and softmax weights (4: plain scalars).
  m.attr("host_vector_bytes") = static_cast<int>(sizeof(specdec::detail::vec_ops<float>::vec));
  m.def(
      "status_code_name",
      [](std::int32_t code) { return specdec::status_code_name(static_cast<specdec::status_code>(code)); },
      nb::arg("code"));
#if defined(SPECDEC_PYTHON_HAS_CUDA)
  m.def("cuda_device_count", &specdec::kernels::device_count);
  m.def(
      "cuda_synchronize",
      [](std::uintptr_t stream) {
        specdec::python::check(specdec::kernels::synchronize(specdec::python::stream_of(stream)));
      },
      nb::arg("stream"));
#endif
  // One binding file per include/specdec area, host and CUDA entry points
  // side by side (python/src/bind_<area>.cpp).
  specdec::python::bind_tree(m);
  specdec::python::bind_verify(m);
  specdec::python::bind_draft(m);
  specdec::python::bind_cache(m);
  specdec::python::bind_ssm(m);
  specdec::python::bind_plan(m);
  specdec::python::bind_loop(m);
  specdec::python::bind_interop(m);
  specdec::python::bind_interop_sglang(m);
}
