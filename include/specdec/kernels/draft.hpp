//! \file
//! Host API of the batched pruning kernel (specdec::kernels). Plain C++:
//! no CUDA header needed. Host twin: specdec/draft/batch_prune.hpp, which
//! gives identical new ids and per-request status codes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec::kernels {

//! Device pointers and sizes of one batched top-B pruning call. Request r
//! owns nodes [offsets[r], offsets[r+1]) with local parent ids. `budget`
//! holds R budgets or is null (then `uniform_budget` applies to all).
//! Outputs: new_index (N local new ids or -1; untouched for a failed
//! request), kept (R), request_status (R status_code values).
struct batch_prune_params {
  const node_id* parent = nullptr;         //!< N local parent ids (root -1), request by request
  const float* score = nullptr;            //!< N node scores
  const std::int32_t* offsets = nullptr;   //!< R + 1 node offsets (CSR)
  const std::int32_t* budget = nullptr;    //!< R budgets, or null: `uniform_budget` for all
  std::int32_t uniform_budget = 0;         //!< the budget when `budget` is null
  std::int32_t num_requests = 0;           //!< R
  std::int32_t total_nodes = 0;            //!< N = offsets[R]
  node_id* new_index = nullptr;            //!< output: N local new ids or -1 (untouched for a failed request)
  std::int32_t* kept = nullptr;            //!< output: R kept counts
  std::int32_t* request_status = nullptr;  //!< output: R status_code values
};
static_assert(std::is_trivially_copyable_v<batch_prune_params>);

//! Whether request spans [begin, end) of a batch of total_nodes nodes are
//! well-formed: 0 <= begin <= end <= total_nodes (for every request in
//! turn, this also makes the spans follow one another without overlap).
//! The kernel checks every request's span in one block before anything
//! else is read; when any fails, every request gets out_of_range and
//! nothing else is read or written. The host tests run the same predicate.
SPECDEC_HD bool prune_span_ok(std::int32_t begin, std::int32_t end, std::int32_t total_nodes) noexcept {
  return begin >= 0 && begin <= end && end <= total_nodes;
}

//! Checks what can be checked on the host without reading device memory:
//! sizes >= 0 and non-null pointers where needed. The workspace (size and
//! 256-byte alignment) is checked by batch_prune_to_budget itself.
inline status batch_prune_can_implement(const batch_prune_params& p) noexcept {
  if (p.num_requests < 0 || p.total_nodes < 0) return make_status(status_code::invalid_argument, "sizes must be >= 0");
  if (p.num_requests == 0) return status::success();
  if (p.offsets == nullptr || p.kept == nullptr || p.request_status == nullptr)
    return make_status(status_code::invalid_argument, "offsets, kept and request_status are required");
  if (p.total_nodes > 0 && (p.parent == nullptr || p.score == nullptr || p.new_index == nullptr))
    return make_status(status_code::invalid_argument, "parent, score and new_index are required");
  return status::success();
}

//! Workspace bytes for these sizes (effective scores, sort keys and CUB's
//! temporary storage, carved with workspace_carver): asks CUB, no device
//! work. 0 for negative sizes or when CUB's query fails.
std::size_t batch_prune_workspace_size(const batch_prune_params& p) noexcept;

//! Enqueues batched ancestor-closed top-B pruning on `stream` (a
//! cudaStream_t; null = default). `workspace`: batch_prune_workspace_size(p)
//! bytes of device memory, 256-byte aligned (buffer_too_small /
//! invalid_argument otherwise). Asynchronous. Offsets that leave [0,
//! total_nodes] or decrease anywhere give every request out_of_range and
//! nothing else is read (prune_span_ok); per-request tree, score and
//! budget errors (an empty request: empty_input) go to request_status.
status batch_prune_to_budget(const batch_prune_params& p, void* workspace, std::size_t workspace_bytes,
                             void* stream) noexcept;

}  // namespace specdec::kernels
