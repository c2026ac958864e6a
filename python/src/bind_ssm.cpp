// Tree-masked selective scan (Mamba2 conventions), the state commit of an
// accepted path, and the tree causal conv1d with its conv-state commit, for float32 and float64 arrays of any strides.
#include <cstdint>
#include <optional>

#include <nanobind/stl/optional.h>

#include "common.hpp"
#include "specdec/ssm/state_commit.hpp"
#include "specdec/ssm/tree_conv1d.hpp"
#include "specdec/ssm/tree_scan.hpp"

namespace specdec::python {
namespace {

template <class T, int R>
using opt_in = std::optional<in_nd<T, R>>;

template <class T, int R>
strided_view<const T, R> opt_view(const opt_in<T, R>& a) {
  return a ? view_of<R>(*a) : strided_view<const T, R>{};
}

template <class T>
tree_ssm_inputs<T> inputs(const in_nd<T, 3>& x, const in_nd<T, 2>& dt, const in_nd<T, 1>& A, const in_nd<T, 3>& B,
                          const in_nd<T, 3>& C, const opt_in<T, 2>& D, const opt_in<T, 1>& dt_bias,
                          const opt_in<T, 3>& z, const opt_in<T, 3>& h0) {
  tree_ssm_inputs<T> in;
  in.x = view_of<3>(x);
  in.dt = view_of<2>(dt);
  in.A = view_of<1>(A);
  in.B = view_of<3>(B);
  in.C = view_of<3>(C);
  in.D = opt_view<T, 2>(D);
  in.dt_bias = opt_view<T, 1>(dt_bias);
  in.z = opt_view<T, 3>(z);
  in.h0 = opt_view<T, 3>(h0);
  return in;
}

template <class T>
tree_ssm_options<T> options(bool dt_softplus, double dt_min, double dt_max) {
  tree_ssm_options<T> o;
  o.dt_softplus = dt_softplus;
  o.dt_min = static_cast<T>(dt_min);
  o.dt_max = static_cast<T>(dt_max);
  return o;
}

template <class T>
void scan(const in1<node_id>& parent, const in_nd<T, 3>& x, const in_nd<T, 2>& dt, const in_nd<T, 1>& A,
          const in_nd<T, 3>& B, const in_nd<T, 3>& C, const opt_in<T, 2>& D, const opt_in<T, 1>& dt_bias,
          const opt_in<T, 3>& z, const opt_in<T, 3>& h0, bool dt_softplus, double dt_min, double dt_max,
          const out_nd<T, 3>& y, const std::optional<out_nd<T, 4>>& states, std::int32_t method) {
  require(method >= 0 && method <= 2, status_code::invalid_argument, "method must be automatic, recurrent or dual");
  const auto in = inputs<T>(x, dt, A, B, C, D, dt_bias, z, h0);
  tree_ssm_shape s;
  check(validate_tree_ssm_shapes(in, s));
  const auto p = span_of(parent);
  require(static_cast<std::int64_t>(p.size()) == s.nodes, status_code::size_mismatch,
          "parent must have one entry per node");
  check(validate_topological_parents(p));
  const auto m = static_cast<tree_scan_method>(method);
  auto ws = scratch(tree_scan_workspace_size<T>(p, s, m));
  check(tree_scan<T>(p, in, options<T>(dt_softplus, dt_min, dt_max), view_of<3>(y),
                     states ? view_of<4>(*states) : view4d<T>{}, ws, m));
}

template <class T>
void commit_path(const in1<node_id>& parent, const in_nd<T, 3>& x, const in_nd<T, 2>& dt, const in_nd<T, 1>& A,
                 const in_nd<T, 3>& B, const in_nd<T, 3>& C, const opt_in<T, 1>& dt_bias, const opt_in<T, 3>& h0,
                 bool dt_softplus, double dt_min, double dt_max, const in1<node_id>& path, const out_nd<T, 3>& h_out) {
  const auto in = inputs<T>(x, dt, A, B, C, std::nullopt, dt_bias, std::nullopt, h0);
  check(tree_ssm_commit_path<T>(span_of(parent), in, options<T>(dt_softplus, dt_min, dt_max), span_of(path),
                                view_of<3>(h_out)));
}

template <class T>
void replay_masked(const in1<node_id>& parent, const in_nd<T, 3>& x, const in_nd<T, 2>& dt, const in_nd<T, 1>& A,
                   const in_nd<T, 3>& B, const in_nd<T, 3>& C, const opt_in<T, 1>& dt_bias, const opt_in<T, 3>& h0,
                   bool dt_softplus, double dt_min, double dt_max, const in1<std::uint64_t>& mask,
                   const out_nd<T, 3>& h_out) {
  const auto in = inputs<T>(x, dt, A, B, C, std::nullopt, dt_bias, std::nullopt, h0);
  check(tree_ssm_replay_masked<T>(span_of(parent), in, options<T>(dt_softplus, dt_min, dt_max), span_of(mask),
                                  view_of<3>(h_out)));
}

template <class T>
void conv1d(const in1<node_id>& parent, const in_nd<T, 2>& x, const in_nd<T, 2>& weight, const opt_in<T, 1>& bias,
            const opt_in<T, 2>& conv_state, bool silu, const out_nd<T, 2>& out) {
  tree_conv1d_inputs<T> in;
  in.x = view_of<2>(x);
  in.weight = view_of<2>(weight);
  in.bias = opt_view<T, 1>(bias);
  in.conv_state = opt_view<T, 2>(conv_state);
  in.silu = silu;
  auto ws = scratch(tree_conv1d_workspace_size(in.weight.extent[1]));
  check(tree_conv1d<T>(span_of(parent), in, view_of<2>(out), ws));
}

template <class T>
void conv1d_commit(const in1<node_id>& parent, const in_nd<T, 2>& x, const in1<node_id>& path,
                   const out_nd<T, 2>& state) {
  check(tree_conv1d_commit_state<T>(span_of(parent), view_of<2>(x), span_of(path), view_of<2>(state)));
}

template <class T>
void bind_typed(nb::module_& m, const char* scan_name, const char* commit_name, const char* replay_name,
                const char* conv_name, const char* conv_commit_name) {
  using nb::arg;
  m.def(scan_name, &scan<T>, arg("parent"), arg("x"), arg("dt"), arg("A"), arg("B"), arg("C"), arg("D").none(),
        arg("dt_bias").none(), arg("z").none(), arg("h0").none(), arg("dt_softplus"), arg("dt_min"), arg("dt_max"),
        arg("y").noconvert(), arg("states").noconvert().none(), arg("method"));
  m.def(commit_name, &commit_path<T>, arg("parent"), arg("x"), arg("dt"), arg("A"), arg("B"), arg("C"),
        arg("dt_bias").none(), arg("h0").none(), arg("dt_softplus"), arg("dt_min"), arg("dt_max"), arg("path"),
        arg("h_out").noconvert());
  m.def(replay_name, &replay_masked<T>, arg("parent"), arg("x"), arg("dt"), arg("A"), arg("B"), arg("C"),
        arg("dt_bias").none(), arg("h0").none(), arg("dt_softplus"), arg("dt_min"), arg("dt_max"), arg("mask"),
        arg("h_out").noconvert());
  m.def(conv_name, &conv1d<T>, arg("parent"), arg("x"), arg("weight"), arg("bias").none(), arg("conv_state").none(),
        arg("silu"), arg("out").noconvert());
  m.def(conv_commit_name, &conv1d_commit<T>, arg("parent"), arg("x"), arg("path"), arg("state").noconvert());
}

}  // namespace

void bind_ssm(nb::module_& m) {
  bind_typed<float>(m, "tree_scan_f32", "ssm_commit_path_f32", "ssm_replay_masked_f32", "tree_conv1d_f32",
                    "tree_conv1d_commit_f32");
  bind_typed<double>(m, "tree_scan_f64", "ssm_commit_path_f64", "ssm_replay_masked_f64", "tree_conv1d_f64",
                     "tree_conv1d_commit_f64");
}

}  // namespace specdec::python
