// specdec._core: the nanobind module. Low-level entry points that write
// into caller arrays; the Python package (specdec/__init__.py) adds the
// allocating conveniences and the docstrings.
#include "common.hpp"
#include "specdec/core/config.hpp"

NB_MODULE(_core, m) {
  namespace nb = nanobind;
  using specdec::python::error;
  nb::exception<error>(m, "Error", PyExc_ValueError);
  m.attr("has_cuda") = false;
  specdec::python::bind_tree(m);
  specdec::python::bind_verify(m);
  specdec::python::bind_cache(m);
  specdec::python::bind_ssm(m);
  specdec::python::bind_plan(m);
}
