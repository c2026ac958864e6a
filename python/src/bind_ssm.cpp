// Tree-masked selective scan (Mamba2 conventions), the state commit of an
// accepted path, and the tree causal conv1d with its conv-state commit, for
// float32 and float64 arrays of any strides; with the kernels, the scan and
// the conv1d on CUDA arrays on the caller's stream.
#include <cstdint>
#include <optional>

#include <nanobind/stl/optional.h>

#include "common.hpp"
#include "common_cuda.hpp"
#include "specdec/ssm/state_commit.hpp"
#include "specdec/ssm/tree_conv1d.hpp"
#include "specdec/ssm/tree_scan.hpp"
#include "specdec/ssm/tree_ssm_batch.hpp"
#if defined(SPECDEC_PYTHON_HAS_CUDA)
#include "specdec/kernels/ssm.hpp"
#endif

namespace specdec::python {
namespace {

template <class T, int R>
using opt_in = std::optional<in_nd<T, R>>;

//! The view of an optional array (host or device), empty when absent.
template <class T, int R, class A>
strided_view<const T, R> opt_view(const std::optional<A>& a) {
  return a ? view_of<R>(*a) : strided_view<const T, R>{};
}
template <class T, int R>
strided_view<const T, R> opt_view(std::nullopt_t) {
  return {};
}

//! The scan's inputs from arrays on either side (optional ones may be
//! std::nullopt).
template <class T, class X, class Dt, class A1, class B3, class OD, class OB, class OZ, class OH>
tree_ssm_inputs<T> inputs(const X& x, const Dt& dt, const A1& A, const B3& B, const B3& C, const OD& D,
                          const OB& dt_bias, const OZ& z, const OH& h0) {
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

// ---- ragged batches (host): one status per request in `status` ----------------

template <class Params>
void batch_counts(const Params& P, std::size_t offsets, std::size_t status, std::size_t parent) {
  require(offsets == status + 1, status_code::size_mismatch, "offsets needs one entry more than status");
  require(static_cast<std::int64_t>(parent) == P.in.x.extent[0], status_code::size_mismatch,
          "parent needs one entry per node row of x");
}

// The params of a batched call from views already made (host and device
// arrays alike), with the counts checked against the arrays' lengths.
template <class T, class Off, class Par, class St>
tree_scan_batch_params<T> scan_batch_params(const Off& offsets, const Par& parent, const tree_ssm_inputs<T>& in,
                                            view4d<const T> h0, const tree_ssm_options<T>& opt, view3d<T> y,
                                            view4d<T> states, const St& status) {
  tree_scan_batch_params<T> P;
  P.offsets = offsets.data();
  P.parent = parent.data();
  P.in = in;
  P.h0 = h0;
  P.opt = opt;
  P.y = y;
  P.states = states;
  P.num_requests = static_cast<std::int32_t>(status.size());
  P.request_status = status.data();
  batch_counts(P, offsets.size(), status.size(), parent.size());
  return P;
}

template <class T, class Off, class Par, class St>
tree_conv1d_batch_params<T> conv1d_batch_params(const Off& offsets, const Par& parent, view2d<const T> x,
                                                view2d<const T> weight, view1d<const T> bias,
                                                view3d<const T> conv_state, bool silu, view2d<T> out,
                                                const St& status) {
  tree_conv1d_batch_params<T> P;
  P.offsets = offsets.data();
  P.parent = parent.data();
  P.in.x = x;
  P.in.weight = weight;
  P.in.bias = bias;
  P.in.silu = silu;
  P.conv_state = conv_state;
  P.out = out;
  P.num_requests = static_cast<std::int32_t>(status.size());
  P.request_status = status.data();
  batch_counts(P, offsets.size(), status.size(), parent.size());
  return P;
}

template <class T>
void scan_batch(const in1<std::int32_t>& offsets, const in1<node_id>& parent, const in_nd<T, 3>& x,
                const in_nd<T, 2>& dt, const in_nd<T, 1>& A, const in_nd<T, 3>& B, const in_nd<T, 3>& C,
                const opt_in<T, 2>& D, const opt_in<T, 1>& dt_bias, const opt_in<T, 3>& z, const opt_in<T, 4>& h0,
                bool dt_softplus, double dt_min, double dt_max, const out_nd<T, 3>& y,
                const std::optional<out_nd<T, 4>>& states, const out1<std::int32_t>& status) {
  const auto P = scan_batch_params<T>(offsets, parent, inputs<T>(x, dt, A, B, C, D, dt_bias, z, std::nullopt),
                                      opt_view<T, 4>(h0), options<T>(dt_softplus, dt_min, dt_max), view_of<3>(y),
                                      states ? view_of<4>(*states) : view4d<T>{}, status);
  tree_ssm_shape s;
  check(tree_scan_batch_check_shapes(P, s));
  auto ws = scratch(tree_scan_batch_workspace_size<T>(span_of(offsets), span_of(parent), s));
  check(tree_scan_batch<T>(P, ws));
}

template <class T>
void conv1d_batch(const in1<std::int32_t>& offsets, const in1<node_id>& parent, const in_nd<T, 2>& x,
                  const in_nd<T, 2>& weight, const opt_in<T, 1>& bias, const opt_in<T, 3>& conv_state, bool silu,
                  const out_nd<T, 2>& out, const out1<std::int32_t>& status) {
  const auto P = conv1d_batch_params<T>(offsets, parent, view_of<2>(x), view_of<2>(weight), opt_view<T, 1>(bias),
                                        opt_view<T, 3>(conv_state), silu, view_of<2>(out), status);
  auto ws = scratch(tree_conv1d_workspace_size(P.in.weight.extent[1]));
  check(tree_conv1d_batch<T>(P, ws));
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

template <class T>
void bind_batch_typed(nb::module_& m, const char* scan_name, const char* conv_name) {
  using nb::arg;
  m.def(scan_name, &scan_batch<T>, arg("offsets"), arg("parent"), arg("x"), arg("dt"), arg("A"), arg("B"), arg("C"),
        arg("D").none(), arg("dt_bias").none(), arg("z").none(), arg("h0").none(), arg("dt_softplus"), arg("dt_min"),
        arg("dt_max"), arg("y").noconvert(), arg("states").noconvert().none(), arg("status").noconvert());
  m.def(conv_name, &conv1d_batch<T>, arg("offsets"), arg("parent"), arg("x"), arg("weight"), arg("bias").none(),
        arg("conv_state").none(), arg("silu"), arg("out").noconvert(), arg("status").noconvert());
}

#if defined(SPECDEC_PYTHON_HAS_CUDA)
// ---- CUDA: tree scan and tree conv1d on the caller's stream ----------------

template <class T, int R>
using dev_opt = std::optional<dev_nd<const T, R>>;

std::size_t ssm_staging() { return sizeof(std::int32_t); }

template <class T>
std::size_t scan_ws_size(std::int64_t N, std::int64_t H, std::int64_t P, std::int64_t S, bool with_states) {
  std::size_t kernel = 0;
  if (!with_states && N > 0 && H > 0 && P > 0 && S > 0) {
    workspace_carver c;
    (void)c.take<T>(static_cast<std::size_t>(N * H * P * S));
    kernel = c.bytes_used();
  }
  return device_scratch::bytes(kernel, ssm_staging());
}

//! The launch both SSM kernels share: one scratch for the kernel's
//! workspace (`size(P)` bytes) and a status slot, the caller's status array
//! or that slot in P.request_status (the kernel resets it: nothing is staged
//! or uploaded), `launch(P, workspace, bytes, stream)`, and with `check_now`
//! a wait that raises on a tree fault.
template <class Params, class Size, class Launch>
void launch_ssm(Params& P, Size size, Launch launch, const std::optional<dev1<std::int32_t>>& status_out,
                const std::optional<dev_bytes>& workspace, std::uintptr_t stream, bool check_now) {
  const cudaStream_t s = stream_of(stream);
  device_scratch ws(size(P), ssm_staging(), workspace, s);
  P.request_status = status_out ? status_out->data() : ws.slot<std::int32_t>(0);
  check(launch(P, ws.kernel(), ws.kernel_bytes(), s));
  if (!check_now) return;
  const std::int32_t code = read_back(P.request_status, s);
  if (code != 0) check(make_status(static_cast<status_code>(code), "parent links are not a topological tree"));
}

template <class T>
void cuda_scan(const dev1<const node_id>& parent, const dev_nd<const T, 3>& x, const dev_nd<const T, 2>& dt,
               const dev_nd<const T, 1>& A, const dev_nd<const T, 3>& B, const dev_nd<const T, 3>& C,
               const dev_opt<T, 2>& D, const dev_opt<T, 1>& dt_bias, const dev_opt<T, 3>& z, const dev_opt<T, 3>& h0,
               bool dt_softplus, double dt_min, double dt_max, const dev_nd<T, 3>& y,
               const std::optional<dev_nd<T, 4>>& states, const std::optional<dev1<std::int32_t>>& status_out,
               const std::optional<dev_bytes>& workspace, std::uintptr_t stream, bool check_now) {
  device_guard g;
  g.add(parent, "parent", x, "x", dt, "dt", A, "A", B, "B", C, "C", D, "D", dt_bias, "dt_bias", z, "z", h0, "h0", y,
        "y", states, "states", status_out, "status", workspace, "workspace");
  require(!status_out || status_out->size() >= 1, status_code::size_mismatch, "status needs one entry");
  kernels::tree_scan_params<T> P;
  P.parent = parent.data();
  P.in = inputs<T>(x, dt, A, B, C, D, dt_bias, z, h0);
  P.opt.dt_softplus = dt_softplus;
  P.opt.dt_min = static_cast<T>(dt_min);
  P.opt.dt_max = static_cast<T>(dt_max);
  P.y = view_of<3>(y);
  if (states) P.states = view_of<4>(*states);
  require(static_cast<std::int64_t>(parent.size()) == P.in.x.extent[0], status_code::size_mismatch,
          "parent must have one entry per node");
  check(kernels::tree_scan_can_implement(P));
  launch_ssm(
      P, [](const auto& q) { return kernels::tree_scan_workspace_size(q); },
      [](const auto&... a) { return kernels::tree_scan(a...); }, status_out, workspace, stream, check_now);
}

template <class T>
void cuda_conv1d(const dev1<const node_id>& parent, const dev_nd<const T, 2>& x, const dev_nd<const T, 2>& weight,
                 const dev_opt<T, 1>& bias, const dev_opt<T, 2>& conv_state, bool silu, const dev_nd<T, 2>& out,
                 const std::optional<dev1<std::int32_t>>& status_out, const std::optional<dev_bytes>& workspace,
                 std::uintptr_t stream, bool check_now) {
  device_guard g;
  g.add(parent, "parent", x, "x", weight, "weight", bias, "bias", conv_state, "conv_state", out, "out", status_out,
        "status", workspace, "workspace");
  require(!status_out || status_out->size() >= 1, status_code::size_mismatch, "status needs one entry");
  kernels::tree_conv1d_params<T> P;
  P.parent = parent.data();
  P.in.x = view_of<2>(x);
  P.in.weight = view_of<2>(weight);
  P.in.bias = opt_view<T, 1>(bias);
  P.in.conv_state = opt_view<T, 2>(conv_state);
  P.in.silu = silu;
  P.out = view_of<2>(out);
  require(static_cast<std::int64_t>(parent.size()) == P.in.x.extent[0], status_code::size_mismatch,
          "parent must have one entry per node");
  check(kernels::tree_conv1d_can_implement(P));
  launch_ssm(
      P, [](const auto& q) { return kernels::tree_conv1d_workspace_size(q); },
      [](const auto&... a) { return kernels::tree_conv1d(a...); }, status_out, workspace, stream, check_now);
}

std::size_t conv1d_ws_size() { return device_scratch::bytes(0, ssm_staging()); }

// Ragged batches: no staging, no allocation, no synchronisation. The
// statuses stay in the caller's `status` (R int32 on the device); the
// workspace (scan without per-node states) comes from the caller, sized by
// cuda_tree_scan_batch_workspace_size.
template <class T>
std::size_t scan_batch_ws_size(std::int64_t capacity, std::int64_t H, std::int64_t P, std::int64_t S,
                               bool with_states) {
  if (with_states || capacity <= 0 || H <= 0 || P <= 0 || S <= 0) return 0;
  workspace_carver c;
  (void)c.take<T>(static_cast<std::size_t>(capacity * H * P * S));
  return c.bytes_used();
}

template <class T>
void cuda_scan_batch(const dev1<const std::int32_t>& offsets, const dev1<const node_id>& parent,
                     const dev_nd<const T, 3>& x, const dev_nd<const T, 2>& dt, const dev_nd<const T, 1>& A,
                     const dev_nd<const T, 3>& B, const dev_nd<const T, 3>& C, const dev_opt<T, 2>& D,
                     const dev_opt<T, 1>& dt_bias, const dev_opt<T, 3>& z, const dev_opt<T, 4>& h0, bool dt_softplus,
                     double dt_min, double dt_max, const dev_nd<T, 3>& y, const std::optional<dev_nd<T, 4>>& states,
                     const dev1<std::int32_t>& status, const std::optional<dev_bytes>& workspace,
                     std::uintptr_t stream) {
  device_guard g;
  g.add(offsets, "offsets", parent, "parent", x, "x", dt, "dt", A, "A", B, "B", C, "C", D, "D", dt_bias, "dt_bias", z,
        "z", h0, "h0", y, "y", states, "states", status, "status", workspace, "workspace");
  const auto P = scan_batch_params<T>(offsets, parent, inputs<T>(x, dt, A, B, C, D, dt_bias, z, std::nullopt),
                                      opt_view<T, 4>(h0), options<T>(dt_softplus, dt_min, dt_max), view_of<3>(y),
                                      states ? view_of<4>(*states) : view4d<T>{}, status);
  check(kernels::tree_scan_batch(P, workspace ? workspace->data() : nullptr, workspace ? workspace->size() : 0,
                                 stream_of(stream)));
}

template <class T>
void cuda_conv1d_batch(const dev1<const std::int32_t>& offsets, const dev1<const node_id>& parent,
                       const dev_nd<const T, 2>& x, const dev_nd<const T, 2>& weight, const dev_opt<T, 1>& bias,
                       const dev_opt<T, 3>& conv_state, bool silu, const dev_nd<T, 2>& out,
                       const dev1<std::int32_t>& status, std::uintptr_t stream) {
  device_guard g;
  g.add(offsets, "offsets", parent, "parent", x, "x", weight, "weight", bias, "bias", conv_state, "conv_state", out,
        "out", status, "status");
  const auto P = conv1d_batch_params<T>(offsets, parent, view_of<2>(x), view_of<2>(weight), opt_view<T, 1>(bias),
                                        opt_view<T, 3>(conv_state), silu, view_of<2>(out), status);
  check(kernels::tree_conv1d_batch(P, nullptr, 0, stream_of(stream)));
}

template <class T>
void bind_cuda_batch_typed(nb::module_& m, const char* scan_name, const char* conv_name, const char* size_name) {
  using nb::arg;
  m.def(size_name, &scan_batch_ws_size<T>, arg("capacity"), arg("heads"), arg("headdim"), arg("dstate"),
        arg("with_states"));
  m.def(scan_name, &cuda_scan_batch<T>, arg("offsets"), arg("parent"), arg("x"), arg("dt"), arg("A"), arg("B"),
        arg("C"), arg("D").none(), arg("dt_bias").none(), arg("z").none(), arg("h0").none(), arg("dt_softplus"),
        arg("dt_min"), arg("dt_max"), arg("y").noconvert(), arg("states").noconvert().none(), arg("status").noconvert(),
        arg("workspace").noconvert().none(), arg("stream"));
  m.def(conv_name, &cuda_conv1d_batch<T>, arg("offsets"), arg("parent"), arg("x"), arg("weight"), arg("bias").none(),
        arg("conv_state").none(), arg("silu"), arg("out").noconvert(), arg("status").noconvert(), arg("stream"));
}

template <class T>
void bind_cuda_typed(nb::module_& m, const char* scan_name, const char* conv_name) {
  using nb::arg;
  m.def(scan_name, &cuda_scan<T>, arg("parent"), arg("x"), arg("dt"), arg("A"), arg("B"), arg("C"), arg("D").none(),
        arg("dt_bias").none(), arg("z").none(), arg("h0").none(), arg("dt_softplus"), arg("dt_min"), arg("dt_max"),
        arg("y").noconvert(), arg("states").noconvert().none(), arg("status").noconvert().none(),
        arg("workspace").noconvert().none(), arg("stream"), arg("check"));
  m.def(conv_name, &cuda_conv1d<T>, arg("parent"), arg("x"), arg("weight"), arg("bias").none(),
        arg("conv_state").none(), arg("silu"), arg("out").noconvert(), arg("status").noconvert().none(),
        arg("workspace").noconvert().none(), arg("stream"), arg("check"));
}
#endif

}  // namespace

void bind_ssm(nb::module_& m) {
  bind_typed<float>(m, "tree_scan_f32", "ssm_commit_path_f32", "ssm_replay_masked_f32", "tree_conv1d_f32",
                    "tree_conv1d_commit_f32");
  bind_typed<double>(m, "tree_scan_f64", "ssm_commit_path_f64", "ssm_replay_masked_f64", "tree_conv1d_f64",
                     "tree_conv1d_commit_f64");
  bind_batch_typed<float>(m, "tree_scan_batch_f32", "tree_conv1d_batch_f32");
  bind_batch_typed<double>(m, "tree_scan_batch_f64", "tree_conv1d_batch_f64");
#if defined(SPECDEC_PYTHON_HAS_CUDA)
  using nb::arg;
  m.def("cuda_tree_scan_workspace_size_f32", &scan_ws_size<float>, arg("nodes"), arg("heads"), arg("headdim"),
        arg("dstate"), arg("with_states"));
  m.def("cuda_tree_scan_workspace_size_f64", &scan_ws_size<double>, arg("nodes"), arg("heads"), arg("headdim"),
        arg("dstate"), arg("with_states"));
  m.def("cuda_tree_conv1d_workspace_size", &conv1d_ws_size);
  bind_cuda_typed<float>(m, "cuda_tree_scan_f32", "cuda_tree_conv1d_f32");
  bind_cuda_typed<double>(m, "cuda_tree_scan_f64", "cuda_tree_conv1d_f64");
  bind_cuda_batch_typed<float>(m, "cuda_tree_scan_batch_f32", "cuda_tree_conv1d_batch_f32",
                               "cuda_tree_scan_batch_workspace_size_f32");
  bind_cuda_batch_typed<double>(m, "cuda_tree_scan_batch_f64", "cuda_tree_conv1d_batch_f64",
                                "cuda_tree_scan_batch_workspace_size_f64");
#endif
}

}  // namespace specdec::python
