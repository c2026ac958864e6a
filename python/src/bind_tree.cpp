// Trees: building from parents / choice lists / path matrices, DFS and BFS
// orders, packed / dense / additive masks, depths and positions, and the
// batched ragged mask build (host, and on CUDA arrays when built with the
// kernels). Every function writes into caller arrays.
#include <cstdint>
#include <optional>

#include <nanobind/stl/optional.h>

#include "common.hpp"
#include "common_cuda.hpp"
#include "specdec/tree/batch.hpp"
#include "specdec/tree/build.hpp"
#include "specdec/tree/mask.hpp"
#include "specdec/tree/order.hpp"
#include "specdec/tree/positions.hpp"
#include "specdec/tree/validate.hpp"
#if defined(SPECDEC_PYTHON_HAS_CUDA)
#include "specdec/kernels/tree.hpp"
#endif

namespace specdec::python {
namespace {

void relabel(const in1<node_id>& parent, const out1<node_id>& new_parent, const out1<node_id>& new_to_old,
             const out1<node_id>& old_to_new) {
  auto ws = scratch(relabel_workspace_size(parent.size()));
  check(relabel_topological(span_of(parent), span_of(new_parent), span_of(new_to_old), span_of(old_to_new), ws));
}

void choices(const in1<std::int32_t>& ranks, const in1<std::int32_t>& offsets, const out1<node_id>& parent,
             const out1<std::int32_t>& node_choice) {
  const std::size_t c = offsets.size() == 0 ? 0 : offsets.size() - 1;
  auto ws = scratch(choices_workspace_size(c));
  check(from_choices(span_of(ranks), span_of(offsets), span_of(parent), ws, span_of(node_choice)));
}

void paths(const in_nd<node_id, 2>& matrix, const out1<node_id>& parent) {
  auto ws = scratch(from_paths_workspace_size(parent.size()));
  check(from_paths(view_of<2>(matrix), span_of(parent), ws));
}

void order(const in1<node_id>& parent, const out1<node_id>& new_to_old, const out1<node_id>& old_to_new, bool bfs) {
  auto ws = scratch(order_workspace_size(parent.size()));
  check(bfs ? bfs_order(span_of(parent), span_of(new_to_old), span_of(old_to_new), ws)
            : dfs_order(span_of(parent), span_of(new_to_old), span_of(old_to_new), ws));
}

void validate(const in1<node_id>& parent) {
  std::int32_t n = 0;
  check(detail::node_count(parent.size(), n));
  check(validate_topological_parents(parent.data(), n));
}

// Row stride of a 2-D output in elements; rows must be contiguous.
template <class A>
std::int64_t row_stride(const A& out) {
  require(out.shape(1) <= 1 || out.stride(1) == 1, status_code::invalid_argument,
          "mask rows must be contiguous (last stride 1)");
  return static_cast<std::int64_t>(out.stride(0));
}

// Span covering a 2-D output's addressable elements.
template <class A>
auto span2(const A& out) {
  using T = std::remove_reference_t<decltype(*out.data())>;
  const std::size_t rows = out.shape(0), cols = out.shape(1);
  const std::size_t n = rows == 0 || cols == 0 ? 0 : (rows - 1) * static_cast<std::size_t>(out.stride(0)) + cols;
  return std::span<T>(out.data(), n);
}

template <class Word>
void packed(const in1<node_id>& parent, const out_nd<Word, 2>& out) {
  require(
      static_cast<std::int64_t>(out.shape(0)) >= static_cast<std::int64_t>(parent.size()) &&
          static_cast<std::int64_t>(out.shape(1)) >= mask_words_per_row<Word>(static_cast<std::int64_t>(parent.size())),
      status_code::buffer_too_small, "mask must be at least N x ceil(N / W) words");
  check(build_packed_mask<Word>(span_of(parent), span2(out), row_stride(out)));
}

void dense(const in1<node_id>& parent, const out_nd<std::uint8_t, 2>& out) {
  require(out.shape(0) >= parent.size() && out.shape(1) >= parent.size(), status_code::buffer_too_small,
          "mask must be at least N x N");
  check(build_dense_mask<std::uint8_t>(span_of(parent), span2(out), row_stride(out)));
}

void dense_bool(const in1<node_id>& parent, const out_nd<bool, 2>& out) {
  require(out.shape(0) >= parent.size() && out.shape(1) >= parent.size(), status_code::buffer_too_small,
          "mask must be at least N x N");
  check(build_dense_mask<bool>(span_of(parent), span2(out), row_stride(out)));
}

template <class Real>
void additive(const in1<node_id>& parent, const out_nd<Real, 2>& out, std::int64_t prefix) {
  require(prefix >= 0, status_code::invalid_argument, "prefix out of range");
  require(out.shape(0) >= parent.size() &&
              static_cast<std::int64_t>(out.shape(1)) >= prefix + static_cast<std::int64_t>(parent.size()),
          status_code::buffer_too_small, "mask must be at least N x (prefix + N)");
  check(build_additive_mask<Real>(span_of(parent), span2(out), prefix, row_stride(out)));
}

template <class Pos>
void positions(const in1<node_id>& parent, Pos cache_len, const out1<Pos>& out) {
  check(build_positions<Pos>(span_of(parent), cache_len, span_of(out)));
}

void depths(const in1<node_id>& parent, const out1<std::int32_t>& out) {
  check(build_depths(span_of(parent), span_of(out)));
}

template <class Word>
void batched(const in1<node_id>& parents, const in1<std::int32_t>& offsets,
             const std::optional<in1<std::int64_t>>& cache_len, const out_nd<Word, 2>& masks,
             const std::optional<out1<std::int64_t>>& positions_out, const out1<std::int32_t>& tree_status,
             std::int32_t max_nodes) {
  check(build_tree_masks_batched<Word>(
      tree_batch_of<Word>(parents, offsets, cache_len, masks, positions_out, tree_status, max_nodes)));
}

#if defined(SPECDEC_PYTHON_HAS_CUDA)
// ---- CUDA: the batched mask build on the caller's stream -------------------

template <class Word>
void cuda_batched(const dev1<const node_id>& parents, const dev1<const std::int32_t>& offsets,
                  const std::optional<dev1<const position_id>>& cache_len, const dev_nd<Word, 2>& masks,
                  const std::optional<dev1<position_id>>& positions, const dev1<std::int32_t>& tree_status,
                  std::int32_t max_nodes, std::uintptr_t stream) {
  device_guard g;
  g.add(parents, "parents", offsets, "offsets", cache_len, "cache_len", masks, "masks", positions, "positions",
        tree_status, "tree_status");
  const auto b = tree_batch_of<Word>(parents, offsets, cache_len, masks, positions, tree_status, max_nodes);
  check(kernels::build_tree_masks_batched_can_implement(b));
  check(kernels::build_tree_masks_batched(b, nullptr, 0, stream_of(stream)));
}
#endif

}  // namespace

void bind_tree(nb::module_& m) {
  using nb::arg;
  m.def("relabel_topological", &relabel, arg("parent"), arg("new_parent").noconvert(), arg("new_to_old").noconvert(),
        arg("old_to_new").noconvert());
  m.def("from_choices", &choices, arg("ranks"), arg("offsets"), arg("parent").noconvert(),
        arg("node_choice").noconvert());
  m.def("from_paths", &paths, arg("paths"), arg("parent").noconvert());
  m.def(
      "tree_order",
      [](const in1<node_id>& p, const out1<node_id>& a, const out1<node_id>& b, bool bfs) { order(p, a, b, bfs); },
      arg("parent"), arg("new_to_old").noconvert(), arg("old_to_new").noconvert(), arg("bfs"));
  m.def("validate_parents", &validate, arg("parent"));
  m.def("packed_mask32", &packed<std::uint32_t>, arg("parent"), arg("out").noconvert());
  m.def("packed_mask64", &packed<std::uint64_t>, arg("parent"), arg("out").noconvert());
  m.def("dense_mask_u8", &dense, arg("parent"), arg("out").noconvert());
  m.def("dense_mask_bool", &dense_bool, arg("parent"), arg("out").noconvert());
  m.def("additive_mask_f32", &additive<float>, arg("parent"), arg("out").noconvert(), arg("prefix"));
  m.def("additive_mask_f64", &additive<double>, arg("parent"), arg("out").noconvert(), arg("prefix"));
  m.def("positions_i32", &positions<std::int32_t>, arg("parent"), arg("cache_len"), arg("out").noconvert());
  m.def("positions_i64", &positions<std::int64_t>, arg("parent"), arg("cache_len"), arg("out").noconvert());
  m.def("depths", &depths, arg("parent"), arg("out").noconvert());
  m.def("tree_masks_batched32", &batched<std::uint32_t>, arg("parents"), arg("offsets"), arg("cache_len").none(),
        arg("masks").noconvert(), arg("positions").noconvert().none(), arg("tree_status").noconvert(),
        arg("max_nodes"));
  m.def("tree_masks_batched64", &batched<std::uint64_t>, arg("parents"), arg("offsets"), arg("cache_len").none(),
        arg("masks").noconvert(), arg("positions").noconvert().none(), arg("tree_status").noconvert(),
        arg("max_nodes"));
#if defined(SPECDEC_PYTHON_HAS_CUDA)
  m.def("cuda_tree_masks_batched32", &cuda_batched<std::uint32_t>, arg("parents"), arg("offsets"),
        arg("cache_len").none(), arg("masks").noconvert(), arg("positions").noconvert().none(),
        arg("tree_status").noconvert(), arg("max_nodes"), arg("stream"));
  m.def("cuda_tree_masks_batched64", &cuda_batched<std::uint64_t>, arg("parents"), arg("offsets"),
        arg("cache_len").none(), arg("masks").noconvert(), arg("positions").noconvert().none(),
        arg("tree_status").noconvert(), arg("max_nodes"), arg("stream"));
#endif
}

}  // namespace specdec::python
