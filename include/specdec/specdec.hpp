//! \file
//! Umbrella header: every host-side specdec header. Not included: the .cuh
//! device templates, the kernels API (specdec/kernels.hpp) and the Eigen
//! GEMM form of the SSM dual scan (specdec/ssm/tree_scan_dual_eigen.hpp),
//! the MPI and NCCL adapters (specdec/parallel/mpi.hpp, nccl.hpp).
#pragma once

#include "specdec/core/config.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/core/workspace.hpp"

#include "specdec/tree/batch.hpp"
#include "specdec/tree/build.hpp"
#include "specdec/tree/mask.hpp"
#include "specdec/tree/order.hpp"
#include "specdec/tree/paths.hpp"
#include "specdec/tree/positions.hpp"
#include "specdec/tree/shape.hpp"
#include "specdec/tree/shapes.hpp"
#include "specdec/tree/structure.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"

#include "specdec/sample/order.hpp"
#include "specdec/sample/row.hpp"
#include "specdec/sample/uniforms.hpp"

#include "specdec/draft/batch_prune.hpp"
#include "specdec/draft/beam_tree.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/draft/level_drafter.hpp"
#include "specdec/draft/prompt_lookup.hpp"
#include "specdec/draft/prune.hpp"
#include "specdec/draft/sampled_tree.hpp"
#include "specdec/draft/specmemo.hpp"
#include "specdec/draft/static_tree.hpp"
#include "specdec/draft/stream_tree.hpp"
#include "specdec/draft/suffix_index.hpp"
#include "specdec/draft/token_info.hpp"
#include "specdec/draft/topk_tree.hpp"
#include "specdec/draft/verify_mode.hpp"

#include "specdec/verify/batch_verify.hpp"
#include "specdec/verify/distribution.hpp"
#include "specdec/verify/policy.hpp"
#include "specdec/verify/request_checks.hpp"
#include "specdec/verify/tree_verify.hpp"
#include "specdec/verify/verify_params.hpp"

#include "specdec/parallel/collective.hpp"
#include "specdec/parallel/sharded_topk.hpp"
#include "specdec/parallel/sharded_verify.hpp"

#include "specdec/cache/batch_layout.hpp"
#include "specdec/cache/forest.hpp"
#include "specdec/cache/keep_indices.hpp"
#include "specdec/cache/kv_commit.hpp"
#include "specdec/cache/kv_layout.hpp"
#include "specdec/cache/row_commit.hpp"

#include "specdec/ssm/state_commit.hpp"
#include "specdec/ssm/tree_conv1d.hpp"
#include "specdec/ssm/tree_decay.hpp"
#include "specdec/ssm/tree_scan.hpp"
#include "specdec/ssm/tree_scan_dense_mask.hpp"
#include "specdec/ssm/tree_scan_dual.hpp"
#include "specdec/ssm/tree_scan_recurrent.hpp"
#include "specdec/ssm/tree_ssm_inputs.hpp"

#include "specdec/plan/acceptance.hpp"
#include "specdec/plan/cost_model.hpp"
#include "specdec/plan/memory_model.hpp"
#include "specdec/plan/sequoia.hpp"

#include "specdec/interop/choice_buffers.hpp"
#include "specdec/interop/greedy_ids.hpp"
#include "specdec/interop/linked_tree.hpp"
#include "specdec/interop/results.hpp"
#include "specdec/interop/sglang.hpp"
#include "specdec/interop/sglang_build_tree.hpp"
#include "specdec/interop/sglang_verify.hpp"
#include "specdec/interop/typical.hpp"

#include "specdec/loop/batch_session.hpp"
#include "specdec/loop/concepts.hpp"
#include "specdec/loop/session.hpp"
