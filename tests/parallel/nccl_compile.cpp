// Compile-only check of the NCCL adapter (built where nccl.h and the CUDA
// runtime headers exist; running it needs GPUs, see docs/parallel.md).
#include "specdec/parallel/nccl.hpp"
#include "specdec/parallel/sharded_topk.hpp"
#include "specdec/parallel/sharded_verify.hpp"

static_assert(specdec::collective<specdec::nccl_collective>);
static_assert(specdec::verify_row_ops<specdec::detail::shard_row_ops<
                  specdec::host_shard_executor<specdec::nccl_collective>, specdec::parent_topology>>);

// Instantiates the sharded entry points on the adapter.
specdec::status specdec_nccl_compile_check(specdec::nccl_collective& c, std::span<const std::int64_t> bounds,
                                           const specdec::tree_view& t, specdec::view2d<const float> p,
                                           specdec::view2d<const float> q, std::span<std::byte> ws,
                                           std::span<specdec::node_id> path, std::span<specdec::token_id> tokens,
                                           specdec::verify_result& r) {
  return specdec::verify_tree_sharded(c, bounds, t, p, q, specdec::verify_params{}, ws, path, tokens, r);
}
