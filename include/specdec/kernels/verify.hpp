//! \file
//! CUDA batched tree verification: the host API of specdec::kernels. The
//! kernel (cuda/verify.cuh) runs THE verification walk of the host
//! verifiers (verify/walk.hpp) with a device row policy, one thread
//! block per request; the request checks are shared too
//! (verify/request_checks.hpp).
//! Every mode runs, block and traversal included (since 0.4.0; not yet run
//! on a device). Greedy requests first have every
//! row's argmax computed by a pre-pass that splits rows over blocks (a
//! second launch on the same stream, verify_argmax_splits); their walk
//! combines the partials instead of scanning rows.
//!
//! Equality with the host path (verify_batch in verify/batch_verify.hpp):
//! same walk, same checks and status codes, same uniforms (keyed Philox or
//! the caller's), row masses and inverse-CDF prefix sums in the same fixed
//! order (sample/order.hpp), the same non-contracted float residual
//! updates and double acceptance products. Paths, tokens and codes are
//! therefore identical for every mode but typical_lossy, whose entropy uses
//! the device's log/exp (a threshold within an ulp of an entry may decide
//! differently).
//!
//! Convention (core/workspace.hpp): verify_batch_workspace_size(params) ->
//! bytes, verify_batch_can_implement(params) -> status (host checks only),
//! verify_batch(params, workspace, bytes, stream); per-request status codes
//! land in results[r].code on the device. The first two are inline here;
//! an engine compiling cuda/verify.cuh itself launches with
//! cuda::verify_batch, which verify_batch wraps.
#pragma once

#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "specdec/core/config.hpp"
#include "specdec/core/float16.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/sample/order.hpp"
#include "specdec/sample/row_transform.hpp"
#include "specdec/sample/sampling_params.hpp"
#include "specdec/sample/split_transform.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/verify_params.hpp"
#include "specdec/verify/walk_state.hpp"

namespace specdec::detail {
//! Chunks a row is split into so that `rows` rows make about
//! target_blocks blocks: ceil(target_blocks / rows), at most `most`.
SPECDEC_HD constexpr std::int64_t chunks_per_row(std::int64_t rows, std::int64_t target_blocks,
                                                 std::int64_t most) noexcept {
  const std::int64_t want = (target_blocks + rows - 1) / rows;
  return want < most ? want : most;
}
}  // namespace specdec::detail

namespace specdec::kernels {

//! Device pointers and sizes of one batched verification launch. All
//! pointers are device memory. Trivially copyable (passed by value to the
//! kernel).
struct verify_batch_params {
  const std::int32_t* offsets = nullptr;  //!< R + 1 node offsets (request r owns [offsets[r], offsets[r + 1]))
  const token_id* token = nullptr;        //!< concatenated tree tokens
  const node_id* parent = nullptr;        //!< concatenated local parent ids (root -1)
  const void* p = nullptr;                //!< offsets[R] target rows, elements of type p_dtype
  std::int64_t p_row_stride = 0;          //!< elements between consecutive p rows
  std::int64_t p_col_stride = 1;          //!< elements between consecutive entries of a p row (any >= 1)
  const void* q = nullptr;                //!< draft rows like p; may be null if no request reads q
  std::int64_t q_row_stride = 0;          //!< elements between consecutive q rows
  std::int64_t q_col_stride = 1;          //!< elements between consecutive entries of a q row (any >= 1)
  //! p's element type: fp32, bf16 or fp16 (each element widened exactly to
  //! float as it is read: the tokens are those of the rows widened first).
  row_dtype p_dtype = row_dtype::f32;
  row_dtype q_dtype = row_dtype::f32;  //!< q's element type
  //! R per-request settings; null: each request's settings are `base`,
  //! with the fields the arrays below give replaced (verify_request_params).
  const verify_params* params = nullptr;
  //! The shared settings when `params` is null (mode, seed, round and the
  //! typical/normalization settings; request r's key is base.request + r
  //! unless `requests` gives it).
  verify_params base{};
  const std::int32_t* modes = nullptr;      //!< optional R modes (verify_mode values), with params null
  const std::uint64_t* seeds = nullptr;     //!< optional R Philox seeds, with params null
  const std::uint32_t* requests = nullptr;  //!< optional R request keys, with params null
  const std::uint32_t* rounds = nullptr;    //!< optional R rounds, with params null
  //! Null for the keyed Philox streams; else offsets[R] x draws_per_node
  //! caller uniforms, node-major (layout of caller_uniforms).
  const double* uniforms = nullptr;
  std::int32_t draws_per_node = 0;  //!< uniforms per node in `uniforms`
  //! Null: p holds probabilities. Else R entries: p holds logits and
  //! request r's target rows are their sampling transform under
  //! p_sampling[r] (sample/row_transform.hpp), found by a pre-pass (a
  //! block per row) and applied as the walk reads; vocab at most
  //! verify_logits_max_vocab. The host twin is verify_batch with
  //! verify_batch_input::p_sampling: the same tokens.
  const sampling_params* p_sampling = nullptr;
  //! q's, as p_sampling (its rows transformed for requests whose mode reads q).
  const sampling_params* q_sampling = nullptr;
  std::int32_t num_requests = 0;  //!< R
  std::int32_t vocab = 0;         //!< V
  std::int32_t max_nodes = 0;     //!< an upper bound on every request's node count
  //! Nodes that token, parent and the p rows hold (q rows and uniforms too,
  //! when given): request r's [offsets[r], offsets[r + 1]) must lie within
  //! [0, node_capacity], checked on the device (verify_request_span).
  std::int32_t node_capacity = 0;
  std::int32_t out_stride = 0;       //!< L: row length of paths and tokens (>= deepest tree + 1)
  node_id* paths = nullptr;          //!< R x L accepted node ids (row r: root first)
  token_id* tokens = nullptr;        //!< R x L emitted tokens
  verify_result* results = nullptr;  //!< R results; code = per-request status
  //! Optional (null = not counted): D counters; entry d - 1 is incremented
  //! (atomically) for every request whose accepted path reaches depth d <= D.
  unsigned long long* accepted_per_depth = nullptr;
  std::int32_t depth_counters = 0;  //!< D
};

static_assert(std::is_trivially_copyable_v<verify_batch_params>);

//! Request r's node span, checked before anything else of the request is
//! read: begin = offsets[r], count = offsets[r + 1] - begin (0 on error).
//! out_of_range when the span leaves [0, node_capacity], not_sorted when it
//! is empty or reversed, size_mismatch when it holds more than max_nodes.
//! Both verification kernels run it per request on the device: a request
//! that fails it reads nothing more and gets its code in results[r]
//! (spans of different requests may overlap: they only share reads). The
//! host tests run the same function (tests/verify/test_kernel_spans.cpp).
SPECDEC_HD status_code verify_request_span(const verify_batch_params& P, std::int32_t r, std::int32_t& begin,
                                           std::int32_t& count) noexcept {
  const std::int32_t b = P.offsets[r], e = P.offsets[r + 1];
  begin = b;
  count = 0;
  if (b < 0 || e < 0 || b > P.node_capacity || e > P.node_capacity) return status_code::out_of_range;
  if (e <= b) return status_code::not_sorted;
  if (e - b > P.max_nodes) return status_code::size_mismatch;
  count = e - b;
  return status_code::ok;
}

//! Request r's settings: params[r], or base with the fields of the
//! per-request arrays that are given (its request key base.request + r when
//! `requests` is null). An engine keeps these arrays on the device and
//! updates them there (rounds += 1 after a round), so the launch needs no
//! upload and a captured graph replays with the new keys.
SPECDEC_HD verify_params verify_request_params(const verify_batch_params& P, std::int32_t r) noexcept {
  if (P.params != nullptr) return P.params[r];
  verify_params vp = P.base;
  vp.request = P.requests != nullptr ? P.requests[r] : P.base.request + static_cast<std::uint32_t>(r);
  if (P.modes != nullptr) vp.mode = static_cast<verify_mode>(P.modes[r]);
  if (P.seeds != nullptr) vp.seed = P.seeds[r];
  if (P.rounds != nullptr) vp.round = P.rounds[r];
  return vp;
}

//! The rows of the request whose nodes begin at `begin` (its span checked
//! by verify_request_span): row u of the walk is row begin + u of p and q.
SPECDEC_HD walk_rows verify_request_rows(const verify_batch_params& P, std::int32_t begin) noexcept {
  const auto at = [&](const void* d, std::int64_t rs, row_dtype t) -> const void* {
    return d == nullptr ? nullptr : static_cast<const char*>(d) + begin * rs * row_dtype_bytes(t);
  };
  return walk_rows{at(P.p, P.p_row_stride, P.p_dtype),
                   P.p_row_stride,
                   P.p_col_stride,
                   at(P.q, P.q_row_stride, P.q_dtype),
                   P.q_row_stride,
                   P.q_col_stride,
                   P.vocab,
                   P.p_dtype,
                   P.q_dtype};
}

//! Bytes of one request's slice of the workspace (the walk's scratch for V
//! and max_nodes, carved as on the host, 256-byte aligned).
SPECDEC_HD std::size_t verify_request_workspace_bytes(std::int32_t vocab, std::int32_t max_nodes) noexcept {
  if (vocab <= 0 || max_nodes <= 0) return 0;
  workspace_carver w;
  (void)carve_walk_scratch(w, vocab, max_nodes);
  return w.bytes_used();
}

//! The greedy pre-pass splits each row into at most ceil(vocab /
//! verify_argmax_min_chunk) chunks, one block each, so that a launch has
//! about verify_argmax_target_blocks blocks: a batch of one request is then
//! read by the whole GPU, not by one multiprocessor.
inline constexpr std::int32_t verify_argmax_min_chunk = 4096;
//! Blocks the greedy pre-pass aims for (a few per multiprocessor).
inline constexpr std::int64_t verify_argmax_target_blocks = 1024;

//! Chunks per row of the greedy pre-pass for a launch's sizes: enough for
//! verify_argmax_target_blocks blocks over num_requests x max_nodes rows,
//! at least 1, at most ceil(vocab / verify_argmax_min_chunk).
SPECDEC_HD std::int32_t verify_argmax_splits(std::int32_t num_requests, std::int32_t vocab,
                                             std::int32_t max_nodes) noexcept {
  if (num_requests <= 0 || vocab <= 0 || max_nodes <= 0) return 0;
  const std::int64_t rows = static_cast<std::int64_t>(num_requests) * max_nodes;
  const std::int64_t most = (static_cast<std::int64_t>(vocab) + verify_argmax_min_chunk - 1) / verify_argmax_min_chunk;
  return static_cast<std::int32_t>(specdec::detail::chunks_per_row(rows, verify_argmax_target_blocks, most));
}

//! One block's share of a row's argmax: the best entry of its chunk (value,
//! index; -1 if the chunk has no comparable entry), and whether the chunk
//! holds a NaN.
struct verify_argmax_partial {
  float v;              //!< the chunk's largest entry
  std::int32_t i;       //!< its index in the row (lowest on ties), -1 if none
  std::int32_t nan;     //!< 1 if the chunk holds a NaN
  std::int32_t unused;  //!< padding to 16 bytes
};

//! Bytes of the greedy pre-pass's table: num_requests x max_nodes rows of
//! verify_argmax_splits partials, 256-byte aligned.
SPECDEC_HD std::size_t verify_argmax_table_bytes(std::int32_t num_requests, std::int32_t vocab,
                                                 std::int32_t max_nodes) noexcept {
  const std::int32_t splits = verify_argmax_splits(num_requests, vocab, max_nodes);
  return align_up(static_cast<std::size_t>(num_requests) * static_cast<std::size_t>(max_nodes) *
                  static_cast<std::size_t>(splits) * sizeof(verify_argmax_partial));
}

//! Launches of at most this many requests run the tile pre-pass: with one
//! block per request they would leave most of the GPU idle.
inline constexpr std::int32_t verify_tiles_max_requests = 16;
//! ... and of at most this many nodes per request: the table and the grid
//! grow with max_nodes, not with the real trees (a generous bound would
//! sum mostly absent rows).
inline constexpr std::int32_t verify_tiles_max_nodes = 256;

//! Whether a launch of these sizes runs the tile pre-pass. Before the
//! walk, blocks spread over the GPU sum every tile (sample/order.hpp) of
//! every p row, and of every q row its mode reads, of the requests whose
//! walk takes row masses (verify_tiles_mode); the walk's mass passes then
//! read those sums instead of the row. The sums are the walk's own warp
//! tile sums, so every token is unchanged.
SPECDEC_HD bool verify_tiles_prepass(std::int32_t num_requests, std::int32_t vocab, std::int32_t max_nodes) noexcept {
  return num_requests > 0 && num_requests <= verify_tiles_max_requests && vocab > 0 && max_nodes > 0 &&
         max_nodes <= verify_tiles_max_nodes;
}

//! Modes whose walk takes masses of p and q rows (all but greedy, which
//! has the argmax pre-pass, and typical_lossy, which takes entropies).
SPECDEC_HD bool verify_tiles_mode(verify_mode m) noexcept {
  return m != verify_mode::greedy && m != verify_mode::typical_lossy;
}

//! u when `r` is row u (< rows) of the rows at `at` (row and column
//! strides rs, cs in elements of type t), else -1: how the device policy
//! recognises a p or q row of its request to find it in a pre-pass table.
//! Integer addresses, since r may point into another allocation.
SPECDEC_HD std::int64_t verify_row_index(const specdec::detail::row_ref& r, const void* at, std::int64_t rs,
                                         std::int64_t cs, row_dtype t, std::int64_t rows) noexcept {
  if (at == nullptr || r.s != cs || r.t != t) return -1;
  const std::int64_t eb = row_dtype_bytes(t);
  const std::intptr_t bytes = reinterpret_cast<std::intptr_t>(r.d) - reinterpret_cast<std::intptr_t>(at);
  if (eb == 0 || bytes % eb != 0) return -1;
  const std::int64_t off = bytes / eb;
  if (rs == 0) return off == 0 ? 0 : -1;
  if (off < 0) return -1;
  // 32-bit division where it fits: the walk asks once per step.
  const bool narrow = rs > 0 && off <= UINT32_MAX && rs <= UINT32_MAX;
  const std::int64_t u = narrow ? static_cast<std::uint32_t>(off) / static_cast<std::uint32_t>(rs) : off / rs;
  return u * rs == off && u < rows ? u : -1;
}

//! Bytes of one row's entry in the tile table: sum_tile_count(vocab) tile
//! sums (double), then as many int32 flags (1: the tile holds an entry
//! below zero).
SPECDEC_HD std::size_t verify_tiles_row_bytes(std::int32_t vocab) noexcept {
  const auto nt = static_cast<std::size_t>(sum_tile_count(vocab));
  return (nt * (sizeof(double) + sizeof(std::int32_t)) + 7) / 8 * 8;
}

//! Bytes of the tile table (0 when the launch does not run the pre-pass):
//! for request r and node j, the entries of row j of p then of row j of q,
//! at entry (r * max_nodes + j) * 2 + k.
SPECDEC_HD std::size_t verify_tiles_table_bytes(std::int32_t num_requests, std::int32_t vocab,
                                                std::int32_t max_nodes) noexcept {
  if (!verify_tiles_prepass(num_requests, vocab, max_nodes)) return 0;
  return align_up(static_cast<std::size_t>(num_requests) * static_cast<std::size_t>(max_nodes) * 2 *
                  verify_tiles_row_bytes(vocab));
}

//! Largest vocabulary of a launch with logits rows (the pre-pass keeps a
//! row's tile sums in shared memory).
inline constexpr std::int32_t verify_logits_max_vocab = 2048 * static_cast<std::int32_t>(sum_tile);

//! Bytes of the logits pre-pass's table (0 without logits rows): the
//! transforms of row j of request r's p at entry r * max_nodes + j, of its
//! q num_requests * max_nodes entries further.
SPECDEC_HD std::size_t verify_transform_table_bytes(std::int32_t num_requests, std::int32_t max_nodes,
                                                    bool logits_rows) noexcept {
  if (!logits_rows || num_requests <= 0 || max_nodes <= 0) return 0;
  return align_up(static_cast<std::size_t>(num_requests) * static_cast<std::size_t>(max_nodes) * 2 *
                  sizeof(row_transform));
}

//! Launches of at most this many rows (num_requests x max_nodes) split
//! the logits pre-pass over blocks (sample/split_transform.hpp): one block
//! per row would leave most of the GPU idle and read each row up to 20
//! times from one multiprocessor. Larger launches keep a block per row.
inline constexpr std::int64_t verify_transform_split_max_rows = 16;
//! Blocks a phase of the split pre-pass aims for (p rows).
inline constexpr std::int64_t verify_transform_split_target_blocks = 256;
//! Fewest tiles (sample/order.hpp) a chunk of the split pre-pass reads.
inline constexpr std::int64_t verify_transform_min_chunk_tiles = 4;

//! Tiles per chunk of the split logits pre-pass for a launch's sizes, 0
//! when the launch keeps one block per row: about
//! verify_transform_split_target_blocks blocks over the launch's rows, at
//! least verify_transform_min_chunk_tiles tiles each, and at least two
//! chunks a row.
SPECDEC_HD std::int64_t verify_transform_chunk_tiles(std::int32_t num_requests, std::int32_t vocab,
                                                     std::int32_t max_nodes) noexcept {
  if (num_requests <= 0 || vocab <= 0 || max_nodes <= 0) return 0;
  const std::int64_t rows = static_cast<std::int64_t>(num_requests) * max_nodes;
  if (rows > verify_transform_split_max_rows) return 0;
  const std::int64_t nt = sum_tile_count(vocab);
  const std::int64_t chunks = specdec::detail::chunks_per_row(rows, verify_transform_split_target_blocks,
                                                              nt / verify_transform_min_chunk_tiles);
  return chunks < 2 ? 0 : (nt + chunks - 1) / chunks;
}

//! Bytes of the split pre-pass's buffers (0 without logits rows or when
//! the launch does not split): for every (request, node, p or q) row, at
//! (r * max_nodes + j) * 2 + k, its split_transform_sums (cleared before
//! the first phase), then its split_transform_state, then its
//! sum_tile_count(vocab) tile sums.
SPECDEC_HD std::size_t verify_transform_split_bytes(std::int32_t num_requests, std::int32_t vocab,
                                                    std::int32_t max_nodes, bool logits_rows) noexcept {
  if (!logits_rows || verify_transform_chunk_tiles(num_requests, vocab, max_nodes) == 0) return 0;
  const std::size_t rows = static_cast<std::size_t>(num_requests) * static_cast<std::size_t>(max_nodes) * 2;
  return align_up(rows * sizeof(split_transform_sums)) + align_up(rows * sizeof(split_transform_state)) +
         align_up(rows * static_cast<std::size_t>(sum_tile_count(vocab)) * sizeof(double));
}

//! Bytes of device workspace for num_requests requests of at most
//! max_nodes nodes over vocab: num_requests slices of
//! verify_request_workspace_bytes, then the greedy pre-pass's table
//! (verify_argmax_table_bytes), then the tile pre-pass's table
//! (verify_tiles_table_bytes, small launches only), then with
//! `logits_rows` the row transforms (verify_transform_table_bytes) and,
//! for small launches, the split pre-pass's buffers
//! (verify_transform_split_bytes). 0 for an empty or malformed launch.
SPECDEC_HD std::size_t verify_batch_workspace_bytes(std::int32_t num_requests, std::int32_t vocab,
                                                    std::int32_t max_nodes, bool logits_rows = false) noexcept {
  if (num_requests <= 0) return 0;
  return verify_request_workspace_bytes(vocab, max_nodes) * static_cast<std::size_t>(num_requests) +
         verify_argmax_table_bytes(num_requests, vocab, max_nodes) +
         verify_tiles_table_bytes(num_requests, vocab, max_nodes) +
         verify_transform_table_bytes(num_requests, max_nodes, logits_rows) +
         verify_transform_split_bytes(num_requests, vocab, max_nodes, logits_rows);
}

//! Whether a launch reads logits rows (p_sampling or q_sampling given).
SPECDEC_HD bool verify_logits_rows(const verify_batch_params& P) noexcept {
  return P.p_sampling != nullptr || P.q_sampling != nullptr;
}

//! verify_batch_workspace_bytes of the launch's sizes.
inline std::size_t verify_batch_workspace_size(const verify_batch_params& P) noexcept {
  return verify_batch_workspace_bytes(P.num_requests, P.vocab, P.max_nodes, verify_logits_rows(P));
}

//! Request r's sampling checks (ok without logits rows): its p_sampling
//! entry, and its q_sampling entry when its mode reads q rows; both
//! sampling_transformable. The kernel and the host twin reject the same
//! requests (invalid_argument).
SPECDEC_HD status_code verify_request_sampling(const verify_batch_params& P, std::int32_t r, verify_mode mode,
                                               std::int32_t nodes) noexcept {
  if (P.p_sampling != nullptr && !sampling_transformable(P.p_sampling[r])) return status_code::invalid_argument;
  if (P.q_sampling != nullptr && P.q != nullptr && uses_draft_probs(mode) && nodes > 1 &&
      !sampling_transformable(P.q_sampling[r]))
    return status_code::invalid_argument;
  return status_code::ok;
}

//! Checks what can be checked on the host without reading device memory:
//! non-null pointers, positive sizes, strides. Per-request problems (a
//! span outside node_capacity, malformed trees, out-of-range tokens, NaN
//! rows, a request longer than max_nodes or deeper than L) are found by the
//! kernel with the host's checks and reported in results[r].code (outputs
//! of that request untouched).
inline status verify_batch_can_implement(const verify_batch_params& P) noexcept {
  if (P.num_requests < 0) return make_status(status_code::invalid_argument, "num_requests must be >= 0");
  if (P.num_requests == 0) return status::success();
  if (P.vocab <= 0) return make_status(status_code::invalid_argument, "vocab must be positive");
  if (P.max_nodes <= 0) return make_status(status_code::invalid_argument, "max_nodes must be positive");
  if (P.node_capacity <= 0) return make_status(status_code::invalid_argument, "node_capacity must be positive");
  if (P.out_stride <= 0) return make_status(status_code::invalid_argument, "out_stride must be positive");
  if (P.offsets == nullptr || P.token == nullptr || P.parent == nullptr || P.p == nullptr || P.paths == nullptr ||
      P.tokens == nullptr || P.results == nullptr)
    return make_status(status_code::invalid_argument, "a required device pointer is null");
  if (!valid_row_dtype(P.p_dtype) || !valid_row_dtype(P.q_dtype))
    return make_status(status_code::invalid_argument, "p_dtype and q_dtype must be f32, bf16 or f16");
  if (P.p_col_stride < 1 || P.q_col_stride < 1)
    return make_status(status_code::invalid_argument, "column strides must be >= 1");
  if (P.p_row_stride < 0 || P.q_row_stride < 0)
    return make_status(status_code::invalid_argument, "row strides must be >= 0");
  if (P.params != nullptr && (P.modes != nullptr || P.seeds != nullptr || P.requests != nullptr || P.rounds != nullptr))
    return make_status(status_code::invalid_argument, "give params, or base with per-request arrays, not both");
  if (P.uniforms != nullptr && P.draws_per_node <= 0)
    return make_status(status_code::invalid_argument, "draws_per_node must be positive with caller uniforms");
  if (P.accepted_per_depth != nullptr && P.depth_counters <= 0)
    return make_status(status_code::invalid_argument, "depth_counters must be positive with accepted_per_depth");
  if (verify_logits_rows(P) && P.vocab > verify_logits_max_vocab)
    return make_status(status_code::invalid_argument, "logits rows need vocab <= verify_logits_max_vocab");
  return status::success();
}

//! Checks, then launches the verification of every request (asynchronous
//! on `stream`, a cudaStream_t; null = default stream). `workspace`: device
//! memory of at least verify_batch_workspace_size(params) bytes, 256-byte
//! aligned (cudaMalloc memory is). Returns buffer_too_small /
//! invalid_argument before launching, else the launch status; read results
//! after synchronizing. Deterministic for given keys or uniforms.
status verify_batch(const verify_batch_params& params, void* workspace, std::size_t workspace_bytes,
                    void* stream) noexcept;

}  // namespace specdec::kernels
