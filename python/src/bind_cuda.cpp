// CUDA entry points (built when specdec::kernels is): the host API of
// include/specdec/kernels/*.hpp on device arrays. Every call runs on the
// caller's stream (an integer cudaStream_t handle; 0 = legacy default) and
// on the device of its arrays, checks with X_can_implement (and the shape
// checks below) before anything is enqueued, and takes its scratch from the
// caller's workspace array, or stream-ordered memory when none is given.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "common.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/kernels/cache.hpp"
#include "specdec/kernels/draft.hpp"
#include "specdec/kernels/interop.hpp"
#include "specdec/kernels/runtime.hpp"
#include "specdec/kernels/ssm.hpp"
#include "specdec/kernels/tree.hpp"
#include "specdec/kernels/verify.hpp"

namespace specdec::python {
namespace {

//! Device arrays: 1-D contiguous, or strided of a fixed rank.
template <class T>
using dev1 = nb::ndarray<T, nb::ndim<1>, nb::c_contig, nb::device::cuda>;
template <class T, int R>
using dev_nd = nb::ndarray<T, nb::ndim<R>, nb::device::cuda>;
using dev_bytes = nb::ndarray<std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cuda>;
using any_dev = nb::ndarray<nb::device::cuda>;
//! An int32 vector on either side (offsets are read on the host).
using any_i32 = nb::ndarray<const std::int32_t, nb::ndim<1>, nb::c_contig>;

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw error(std::string("cuda_error: ") + what + ": " + cudaGetErrorString(e));
}

cudaStream_t stream_of(std::uintptr_t handle) { return reinterpret_cast<cudaStream_t>(handle); }

//! The one device of a call's arrays, made current for the launch (and the
//! previous device restored after it).
class device_guard {
 public:
  device_guard() = default;
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;
  ~device_guard() {
    if (prev_ >= 0 && prev_ != dev_) (void)cudaSetDevice(prev_);
  }
  template <class A>
  void add(const A& a, const char* name) {
    const int d = static_cast<int>(a.device_id());
    if (dev_ < 0) {
      dev_ = d;
      cuda_check(cudaGetDevice(&prev_), "cudaGetDevice");
      if (prev_ != dev_) cuda_check(cudaSetDevice(dev_), "cudaSetDevice");
    } else if (d != dev_) {
      throw error(std::string("invalid_argument: ") + name + " is on another CUDA device than the other arrays");
    }
  }
  template <class A>
  void add(const std::optional<A>& a, const char* name) {
    if (a) add(*a, name);
  }

 private:
  int dev_ = -1;
  int prev_ = -1;
};

//! A call's device scratch: the kernel's workspace followed by the small
//! host-built arguments (parameter arrays, tensor descriptions, status
//! words), uploaded with one copy. Backed by the caller's byte array, else
//! by cudaMallocAsync memory freed on the same stream after the launch.
class device_scratch {
 public:
  device_scratch(std::size_t kernel_bytes, std::size_t staging_bytes, const std::optional<dev_bytes>& given,
                 cudaStream_t stream)
      : kernel_(align_up(kernel_bytes)), staging_(align_up(staging_bytes)), stream_(stream) {
    const std::size_t total = kernel_ + staging_;
    if (given) {
      require(given->size() >= total, status_code::buffer_too_small,
              ("workspace too small: " + std::to_string(total) + " bytes needed").c_str());
      base_ = reinterpret_cast<std::byte*>(given->data());
      require(reinterpret_cast<std::uintptr_t>(base_) % workspace_alignment == 0, status_code::invalid_argument,
              "workspace must be 256-byte aligned");
    } else if (total > 0) {
      void* p = nullptr;
      cuda_check(cudaMallocAsync(&p, total, stream_), "cudaMallocAsync");
      base_ = static_cast<std::byte*>(p);
      owned_ = true;
    }
    host_ = scratch(staging_);
    if (staging_ > 0) std::memset(host_.data(), 0, staging_);
  }
  device_scratch(const device_scratch&) = delete;
  device_scratch& operator=(const device_scratch&) = delete;
  ~device_scratch() {
    if (owned_) (void)cudaFreeAsync(base_, stream_);
  }
  //! Bytes a caller's workspace needs for these sizes.
  static std::size_t bytes(std::size_t kernel_bytes, std::size_t staging_bytes) {
    return align_up(kernel_bytes) + align_up(staging_bytes);
  }
  void* kernel() const { return kernel_ > 0 ? base_ : nullptr; }
  std::size_t kernel_bytes() const { return kernel_; }
  //! Stages `count` values at byte `offset` of the staging area; returns
  //! their device address.
  template <class T>
  T* stage(std::size_t offset, const T* values, std::size_t count) {
    std::memcpy(host_.data() + offset, values, count * sizeof(T));
    return reinterpret_cast<T*>(base_ + kernel_ + offset);
  }
  //! Uploads what was staged (pageable source: the copy is staged by the
  //! driver before this returns, so the host buffer may be reused).
  void upload() {
    if (staging_ > 0)
      cuda_check(cudaMemcpyAsync(base_ + kernel_, host_.data(), staging_, cudaMemcpyHostToDevice, stream_),
                 "cudaMemcpyAsync");
  }

 private:
  static std::size_t align_up(std::size_t b) {
    return (b + workspace_alignment - 1) / workspace_alignment * workspace_alignment;
  }
  std::size_t kernel_ = 0;
  std::size_t staging_ = 0;
  cudaStream_t stream_ = nullptr;
  std::byte* base_ = nullptr;
  bool owned_ = false;
  std::span<std::byte> host_;
};

//! Reads a value from device memory after everything enqueued on `stream`.
template <class T>
T read_back(const T* device_value, cudaStream_t stream) {
  T v{};
  cuda_check(cudaMemcpyAsync(&v, device_value, sizeof(T), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return v;
}

//! Host copy of a CSR offsets vector given on either side (a device vector
//! is copied on the stream, which synchronizes it).
std::vector<std::int32_t> host_offsets(const any_i32& offsets, cudaStream_t stream) {
  std::vector<std::int32_t> h(offsets.size());
  if (offsets.device_type() == nb::device::cuda::value) {
    if (!h.empty())
      cuda_check(
          cudaMemcpyAsync(h.data(), offsets.data(), h.size() * sizeof(std::int32_t), cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync");
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  } else {
    require(offsets.device_type() == nb::device::cpu::value, status_code::invalid_argument,
            "offsets must be in host or CUDA memory");
    std::copy(offsets.data(), offsets.data() + offsets.size(), h.begin());
  }
  return h;
}

//! Checks CSR offsets (0 first, non-decreasing, last <= total); returns the
//! largest request.
std::int32_t check_offsets(const std::vector<std::int32_t>& off, std::size_t total, bool allow_empty) {
  require(!off.empty(), status_code::invalid_argument, "offsets needs R + 1 entries");
  require(off[0] == 0, status_code::invalid_argument, "offsets must start at 0");
  std::int32_t largest = 0;
  for (std::size_t r = 0; r + 1 < off.size(); ++r) {
    require(off[r + 1] > off[r] || (allow_empty && off[r + 1] == off[r]), status_code::invalid_argument,
            allow_empty ? "offsets must be non-decreasing" : "every request needs at least one node");
    largest = std::max(largest, off[r + 1] - off[r]);
  }
  require(static_cast<std::size_t>(off.back()) <= total, status_code::size_mismatch,
          "offsets run past the node arrays");
  return largest;
}

// ---------------------------------------------------------------------------
// tree masks and positions
// ---------------------------------------------------------------------------

template <class Word>
void tree_masks(const dev1<const node_id>& parents, const dev1<const std::int32_t>& offsets,
                const std::optional<dev1<const position_id>>& cache_len, const dev_nd<Word, 2>& masks,
                const std::optional<dev1<position_id>>& positions, const dev1<std::int32_t>& tree_status,
                std::int32_t max_nodes, std::uintptr_t stream) {
  device_guard g;
  g.add(parents, "parents");
  g.add(offsets, "offsets");
  g.add(cache_len, "cache_len");
  g.add(masks, "masks");
  g.add(positions, "positions");
  g.add(tree_status, "tree_status");
  require(offsets.size() >= 1, status_code::invalid_argument, "offsets needs R + 1 entries");
  const std::size_t R = offsets.size() - 1;
  const std::size_t n = parents.size();
  require(n <= static_cast<std::size_t>(INT32_MAX) && R <= static_cast<std::size_t>(INT32_MAX),
          status_code::invalid_argument, "batch too large");
  require(masks.shape(0) >= n && (masks.shape(1) <= 1 || masks.stride(1) == 1), status_code::size_mismatch,
          "masks needs one row (contiguous words) per node");
  require(!positions || positions->size() >= n, status_code::size_mismatch, "positions needs one entry per node");
  require(tree_status.size() >= R, status_code::size_mismatch, "tree_status needs one entry per tree");
  require(!cache_len || cache_len->size() >= R, status_code::size_mismatch, "cache_len needs one entry per tree");
  require(static_cast<std::int64_t>(masks.shape(1)) >= mask_words_per_row<Word>(max_nodes),
          status_code::buffer_too_small, "masks rows are narrower than ceil(max_nodes / word bits)");
  tree_mask_batch<Word> b;
  b.parents = parents.data();
  b.offsets = offsets.data();
  b.cache_len = cache_len ? cache_len->data() : nullptr;
  b.masks = masks.data();
  b.positions = positions ? positions->data() : nullptr;
  b.tree_status = tree_status.data();
  b.num_trees = static_cast<std::int32_t>(R);
  b.max_nodes = max_nodes;
  b.capacity_nodes = static_cast<std::int32_t>(n);
  b.row_stride_words =
      masks.shape(0) <= 1 ? static_cast<std::int64_t>(masks.shape(1)) : static_cast<std::int64_t>(masks.stride(0));
  check(kernels::build_tree_masks_can_implement(b));
  check(kernels::build_tree_masks(b, nullptr, 0, stream_of(stream)));
}

// ---------------------------------------------------------------------------
// verification
// ---------------------------------------------------------------------------

std::size_t verify_staging(std::size_t R, bool upload_offsets) {
  return R * sizeof(verify_params) + (upload_offsets ? workspace_alignment + (R + 1) * sizeof(std::int32_t) : 0);
}

std::size_t verify_ws_size(std::int64_t R, std::int32_t vocab, std::int32_t max_nodes, bool upload_offsets) {
  if (R <= 0) return 0;
  return device_scratch::bytes(
      kernels::verify_request_workspace_bytes(vocab, std::max(max_nodes, 1)) * static_cast<std::size_t>(R),
      verify_staging(static_cast<std::size_t>(R), upload_offsets));
}

void verify(const any_i32& offsets, const dev1<const node_id>& parent, const dev1<const token_id>& tokens,
            const dev_nd<const float, 2>& p, const std::optional<dev_nd<const float, 2>>& q,
            const in1<std::int32_t>& modes, const in1<std::uint64_t>& seeds, const in1<std::uint32_t>& requests,
            const in1<std::uint32_t>& rounds, float eps, float delta, float tol,
            const std::optional<dev_nd<const double, 2>>& uniforms, const dev_nd<node_id, 2>& paths_out,
            const dev_nd<token_id, 2>& tokens_out, const dev_nd<std::int32_t, 2>& results,
            const std::optional<dev1<std::int64_t>>& accepted_per_depth, const std::optional<dev_bytes>& workspace,
            std::uintptr_t stream) {
  device_guard g;
  g.add(parent, "parent");
  g.add(tokens, "tokens");
  g.add(p, "p");
  g.add(q, "q");
  g.add(uniforms, "uniforms");
  g.add(paths_out, "paths");
  g.add(tokens_out, "tokens_out");
  g.add(results, "results");
  g.add(accepted_per_depth, "accepted_per_depth");
  g.add(workspace, "workspace");
  const bool dev_offsets = offsets.device_type() == nb::device::cuda::value;
  if (dev_offsets) g.add(offsets, "offsets");
  const cudaStream_t s = stream_of(stream);
  const std::vector<std::int32_t> off = host_offsets(offsets, s);
  require(parent.size() == tokens.size(), status_code::size_mismatch, "parent and tokens differ in size");
  const std::int32_t largest = check_offsets(off, parent.size(), true);
  const std::size_t R = off.size() - 1;
  require(modes.size() == R && seeds.size() == R && requests.size() == R && rounds.size() == R,
          status_code::size_mismatch, "modes, seeds, requests and rounds need one entry per request");
  const auto nodes = static_cast<std::size_t>(off.back());
  require(p.shape(0) >= nodes, status_code::size_mismatch, "p needs one row per node");
  require(p.shape(1) >= 1 && p.shape(1) <= static_cast<std::size_t>(INT32_MAX), status_code::invalid_argument,
          "p needs 1 .. 2^31-1 columns");
  const auto V = static_cast<std::int32_t>(p.shape(1));
  require(!q || (q->shape(0) >= nodes && q->shape(1) == p.shape(1)), status_code::size_mismatch,
          "q needs one row of V entries per node");
  if (uniforms)
    require(uniforms->shape(0) >= nodes && uniforms->shape(1) > 0 && uniforms->stride(1) == 1 &&
                (uniforms->shape(0) <= 1 || static_cast<std::size_t>(uniforms->stride(0)) == uniforms->shape(1)),
            status_code::invalid_argument, "uniforms must be a dense nodes x draws array");
  const auto L = paths_out.shape(1);
  require(paths_out.shape(0) == R && tokens_out.shape(0) == R && tokens_out.shape(1) == L && L >= 1 &&
              paths_out.stride(1) == 1 && tokens_out.stride(1) == 1 &&
              (R <= 1 || (static_cast<std::size_t>(paths_out.stride(0)) == L &&
                          static_cast<std::size_t>(tokens_out.stride(0)) == L)),
          status_code::size_mismatch, "paths and tokens_out must be dense R x L int32 arrays");
  require(
      results.shape(0) == R && results.shape(1) == 4 && results.stride(1) == 1 && (R <= 1 || results.stride(0) == 4),
      status_code::size_mismatch, "results must be a dense R x 4 int32 array");
  require(!accepted_per_depth || accepted_per_depth->size() >= 1, status_code::invalid_argument,
          "accepted_per_depth needs at least one counter");
  if (R == 0) return;
  static_assert(sizeof(verify_result) == 4 * sizeof(std::int32_t) && std::is_standard_layout_v<verify_result>);
  std::vector<verify_params> vps(R);
  for (std::size_t r = 0; r < R; ++r) {
    verify_params& vp = vps[r];
    vp.mode = static_cast<verify_mode>(modes.data()[r]);
    vp.seed = seeds.data()[r];
    vp.request = requests.data()[r];
    vp.round = rounds.data()[r];
    vp.typical_epsilon = eps;
    vp.typical_delta = delta;
    vp.normalization_tolerance = tol;
  }
  kernels::verify_batch_params P;
  P.token = tokens.data();
  P.parent = parent.data();
  P.p = p.data();
  P.p_row_stride = static_cast<std::int64_t>(p.stride(0));
  P.p_col_stride = static_cast<std::int64_t>(p.stride(1));
  if (q) {
    P.q = q->data();
    P.q_row_stride = static_cast<std::int64_t>(q->stride(0));
    P.q_col_stride = static_cast<std::int64_t>(q->stride(1));
  }
  if (uniforms) {
    P.uniforms = uniforms->data();
    P.draws_per_node = static_cast<std::int32_t>(uniforms->shape(1));
  }
  P.num_requests = static_cast<std::int32_t>(R);
  P.vocab = V;
  P.max_nodes = std::max(largest, 1);
  P.out_stride = static_cast<std::int32_t>(L);
  P.paths = paths_out.data();
  P.tokens = tokens_out.data();
  P.results = reinterpret_cast<verify_result*>(results.data());
  if (accepted_per_depth) {
    P.accepted_per_depth = reinterpret_cast<unsigned long long*>(accepted_per_depth->data());
    P.depth_counters = static_cast<std::int32_t>(accepted_per_depth->size());
  }
  const std::size_t kernel_bytes = kernels::verify_request_workspace_bytes(V, P.max_nodes) * R;
  device_scratch ws(kernel_bytes, verify_staging(R, !dev_offsets), workspace, s);
  P.params = ws.stage(0, vps.data(), R);
  if (dev_offsets) {
    P.offsets = offsets.data();
  } else {
    const std::size_t at =
        (R * sizeof(verify_params) + workspace_alignment - 1) / workspace_alignment * workspace_alignment;
    P.offsets = ws.stage(at, off.data(), R + 1);
  }
  check(kernels::verify_batch_can_implement(P));
  ws.upload();
  check(kernels::verify_batch(P, ws.kernel(), ws.kernel_bytes(), s));
}

// ---------------------------------------------------------------------------
// batched pruning
// ---------------------------------------------------------------------------

kernels::batch_prune_params prune_params(std::int64_t R, std::int64_t N) {
  kernels::batch_prune_params P;
  P.num_requests = static_cast<std::int32_t>(R);
  P.total_nodes = static_cast<std::int32_t>(N);
  return P;
}

std::size_t prune_ws_size(std::int64_t R, std::int64_t N, bool upload_offsets) {
  return device_scratch::bytes(kernels::batch_prune_workspace_size(prune_params(R, N)),
                               upload_offsets ? static_cast<std::size_t>(R + 1) * sizeof(std::int32_t) : 0);
}

void prune_batch(const dev1<const node_id>& parent, const dev1<const float>& score, const any_i32& offsets,
                 const std::optional<dev1<const std::int32_t>>& budgets, std::int32_t uniform_budget,
                 const dev1<node_id>& new_index, const dev1<std::int32_t>& kept,
                 const dev1<std::int32_t>& request_status, const std::optional<dev_bytes>& workspace,
                 std::uintptr_t stream) {
  device_guard g;
  g.add(parent, "parent");
  g.add(score, "score");
  g.add(budgets, "budgets");
  g.add(new_index, "new_index");
  g.add(kept, "kept");
  g.add(request_status, "request_status");
  g.add(workspace, "workspace");
  const bool dev_offsets = offsets.device_type() == nb::device::cuda::value;
  if (dev_offsets) g.add(offsets, "offsets");
  const cudaStream_t s = stream_of(stream);
  const std::vector<std::int32_t> off = host_offsets(offsets, s);
  require(parent.size() == score.size(), status_code::size_mismatch, "parent and score sizes differ");
  (void)check_offsets(off, parent.size(), false);
  require(static_cast<std::size_t>(off.back()) == parent.size(), status_code::invalid_argument,
          "offsets must run from 0 to the node count");
  const std::size_t R = off.size() - 1;
  require(!budgets || budgets->size() == R, status_code::size_mismatch, "one budget per request");
  require(new_index.size() >= parent.size() && kept.size() >= R && request_status.size() >= R,
          status_code::buffer_too_small, "outputs too small");
  if (R == 0) return;
  kernels::batch_prune_params P = prune_params(static_cast<std::int64_t>(R), static_cast<std::int64_t>(parent.size()));
  P.parent = parent.data();
  P.score = score.data();
  P.budget = budgets ? budgets->data() : nullptr;
  P.uniform_budget = uniform_budget;
  P.new_index = new_index.data();
  P.kept = kept.data();
  P.request_status = request_status.data();
  device_scratch ws(kernels::batch_prune_workspace_size(P), dev_offsets ? 0 : (R + 1) * sizeof(std::int32_t), workspace,
                    s);
  P.offsets = dev_offsets ? offsets.data() : ws.stage(0, off.data(), R + 1);
  check(kernels::batch_prune_can_implement(P));
  ws.upload();
  check(kernels::batch_prune_to_budget(P, ws.kernel(), ws.kernel_bytes(), s));
}

// ---------------------------------------------------------------------------
// KV commit
// ---------------------------------------------------------------------------

std::size_t kv_staging(std::size_t tensors) {
  return workspace_alignment + tensors * sizeof(kv_tensor<void>);  // status word first, then the descriptions
}

std::size_t kv_ws_size(std::int64_t tensors) {
  return device_scratch::bytes(0, kv_staging(static_cast<std::size_t>(std::max<std::int64_t>(tensors, 0))));
}

void commit_kv(const std::vector<any_dev>& caches, const std::string& layout, const dev1<const position_id>& cache_len,
               const dev1<const std::int32_t>& keep_offsets, const dev1<const position_id>& keep,
               const std::optional<dev_nd<const std::int32_t, 2>>& block_table,
               const std::optional<dev1<const std::int32_t>>& blocks_used,
               const std::optional<dev1<std::int64_t>>& status_out, const std::optional<dev_bytes>& workspace,
               std::uintptr_t stream, bool sync) {
  require(!caches.empty(), status_code::empty_input, "no cache tensors");
  device_guard g;
  for (const auto& c : caches) g.add(c, "a cache tensor");
  g.add(cache_len, "cache_len");
  g.add(keep_offsets, "keep_offsets");
  g.add(keep, "keep");
  g.add(block_table, "block_table");
  g.add(blocks_used, "blocks_used");
  g.add(status_out, "status");
  g.add(workspace, "workspace");
  const std::size_t R = cache_len.size();
  require(keep_offsets.size() == R + 1, status_code::size_mismatch, "keep_offsets needs R + 1 entries");
  require(!status_out || status_out->size() >= 1, status_code::size_mismatch, "status needs one entry");
  const std::size_t bytes = caches[0].itemsize();
  for (const auto& c : caches)
    require(c.itemsize() == bytes, status_code::invalid_argument, "cache tensors must share one element size");
  kernels::kv_commit_params P;
  const bool paged = block_table.has_value();
  if (paged) {
    require(block_table->shape(1) == 0 || block_table->stride(1) == 1, status_code::invalid_argument,
            "block_table rows must be contiguous");
    require(block_table->shape(0) >= R, status_code::size_mismatch, "block_table needs one row per request");
    require(!blocks_used || blocks_used->size() >= R, status_code::size_mismatch,
            "blocks_used needs one entry per request");
    P.map = paged_positions(block_table->data(), static_cast<std::int64_t>(block_table->shape(1)), 0, 0,
                            blocks_used ? blocks_used->data() : nullptr);
    P.map.block_table_stride = static_cast<std::int64_t>(block_table->stride(0));
  }
  std::vector<kv_tensor<void>> ts;
  std::int64_t max_layers = 1, max_heads = 1;
  for (std::size_t i = 0; i < caches.size(); ++i) {
    std::int64_t positions = 0, rows = 0;
    ts.push_back(describe_kv<void>(caches[i], layout, positions, rows));
    if (i == 0) {
      if (paged) {
        P.map.page_size = positions;
        P.map.num_pages = rows;
      } else {
        P.map.capacity = positions;
      }
    }
    const std::int64_t want = paged ? P.map.page_size : P.map.capacity;
    require(positions == want && (!paged || rows == P.map.num_pages), status_code::size_mismatch,
            "every cache tensor needs the same positions (and pages)");
    require(paged || rows >= static_cast<std::int64_t>(R), status_code::size_mismatch,
            "a contiguous cache needs one row per request");
    max_layers = std::max(max_layers, ts.back().layers);
    max_heads = std::max(max_heads, ts.back().heads);
  }
  require(
      caches.size() <= 65535 && max_layers <= 65535 && max_heads <= 65535 && R <= static_cast<std::size_t>(INT32_MAX),
      status_code::unsupported, "too many tensors, layers, heads or requests");
  P.num_tensors = static_cast<std::int32_t>(ts.size());
  P.elem_bytes = static_cast<std::int32_t>(bytes);
  P.max_layers = static_cast<std::int32_t>(max_layers);
  P.max_heads = static_cast<std::int32_t>(max_heads);
  P.batch.num_requests = static_cast<std::int32_t>(R);
  P.batch.cache_len = cache_len.data();
  P.batch.keep_offsets = keep_offsets.data();
  P.batch.keep = keep.size() > 0 ? keep.data() : nullptr;
  P.total_keep = static_cast<std::int64_t>(keep.size());
  const cudaStream_t s = stream_of(stream);
  device_scratch ws(0, kv_staging(ts.size()), workspace, s);
  const std::uint64_t ok = kernels::kv_commit_status_ok;
  std::uint64_t* word = ws.stage(0, &ok, 1);
  if (status_out) word = reinterpret_cast<std::uint64_t*>(status_out->data());
  P.status_word = word;
  P.tensors = ws.stage(workspace_alignment, ts.data(), ts.size());
  check(kernels::kv_commit_can_implement(P));
  if (R == 0) return;
  ws.upload();
  check(kernels::kv_commit(P, ws.kernel(), ws.kernel_bytes(), s));
  if (sync) check(kernels::kv_commit_result(read_back(word, s)));
}

//! The status a kv_commit status word (read back by the caller) stands for;
//! raises on failure.
void kv_commit_check(std::uint64_t word) { check(kernels::kv_commit_result(word)); }

// ---------------------------------------------------------------------------
// SSM: tree scan and tree conv1d
// ---------------------------------------------------------------------------

template <class T, int R>
using dev_opt = std::optional<dev_nd<const T, R>>;

template <class T, int R>
strided_view<const T, R> dev_view(const dev_opt<T, R>& a) {
  return a ? view_of<R>(*a) : strided_view<const T, R>{};
}

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
//! workspace (`size(P)` bytes) and the staged status word, the caller's
//! status array or that word in P.status_word, `launch(P, workspace, bytes,
//! stream)`, and with `sync` a wait that raises on a tree fault.
template <class Params, class Size, class Launch>
void launch_ssm(Params& P, Size size, Launch launch, const std::optional<dev1<std::int32_t>>& status_out,
                const std::optional<dev_bytes>& workspace, std::uintptr_t stream, bool sync) {
  const cudaStream_t s = stream_of(stream);
  device_scratch ws(size(P), ssm_staging(), workspace, s);
  const std::int32_t zero = 0;
  std::int32_t* word = ws.stage(0, &zero, 1);
  P.status_word = status_out ? status_out->data() : word;
  ws.upload();
  check(launch(P, ws.kernel(), ws.kernel_bytes(), s));
  if (!sync) return;
  const std::int32_t code = read_back(P.status_word, s);
  if (code != 0) check(make_status(static_cast<status_code>(code), "parent links are not a topological tree"));
}

template <class T>
void scan(const dev1<const node_id>& parent, const dev_nd<const T, 3>& x, const dev_nd<const T, 2>& dt,
          const dev_nd<const T, 1>& A, const dev_nd<const T, 3>& B, const dev_nd<const T, 3>& C, const dev_opt<T, 2>& D,
          const dev_opt<T, 1>& dt_bias, const dev_opt<T, 3>& z, const dev_opt<T, 3>& h0, bool dt_softplus,
          double dt_min, double dt_max, const dev_nd<T, 3>& y, const std::optional<dev_nd<T, 4>>& states,
          const std::optional<dev1<std::int32_t>>& status_out, const std::optional<dev_bytes>& workspace,
          std::uintptr_t stream, bool sync) {
  device_guard g;
  g.add(parent, "parent");
  g.add(x, "x");
  g.add(dt, "dt");
  g.add(A, "A");
  g.add(B, "B");
  g.add(C, "C");
  g.add(D, "D");
  g.add(dt_bias, "dt_bias");
  g.add(z, "z");
  g.add(h0, "h0");
  g.add(y, "y");
  g.add(states, "states");
  g.add(status_out, "status");
  g.add(workspace, "workspace");
  require(!status_out || status_out->size() >= 1, status_code::size_mismatch, "status needs one entry");
  kernels::tree_scan_params<T> P;
  P.parent = parent.data();
  P.in.x = view_of<3>(x);
  P.in.dt = view_of<2>(dt);
  P.in.A = view_of<1>(A);
  P.in.B = view_of<3>(B);
  P.in.C = view_of<3>(C);
  P.in.D = dev_view<T, 2>(D);
  P.in.dt_bias = dev_view<T, 1>(dt_bias);
  P.in.z = dev_view<T, 3>(z);
  P.in.h0 = dev_view<T, 3>(h0);
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
      [](const auto&... a) { return kernels::tree_scan(a...); }, status_out, workspace, stream, sync);
}

template <class T>
void conv1d(const dev1<const node_id>& parent, const dev_nd<const T, 2>& x, const dev_nd<const T, 2>& weight,
            const dev_opt<T, 1>& bias, const dev_opt<T, 2>& conv_state, bool silu, const dev_nd<T, 2>& out,
            const std::optional<dev1<std::int32_t>>& status_out, const std::optional<dev_bytes>& workspace,
            std::uintptr_t stream, bool sync) {
  device_guard g;
  g.add(parent, "parent");
  g.add(x, "x");
  g.add(weight, "weight");
  g.add(bias, "bias");
  g.add(conv_state, "conv_state");
  g.add(out, "out");
  g.add(status_out, "status");
  g.add(workspace, "workspace");
  require(!status_out || status_out->size() >= 1, status_code::size_mismatch, "status needs one entry");
  kernels::tree_conv1d_params<T> P;
  P.parent = parent.data();
  P.in.x = view_of<2>(x);
  P.in.weight = view_of<2>(weight);
  P.in.bias = dev_view<T, 1>(bias);
  P.in.conv_state = dev_view<T, 2>(conv_state);
  P.in.silu = silu;
  P.out = view_of<2>(out);
  require(static_cast<std::int64_t>(parent.size()) == P.in.x.extent[0], status_code::size_mismatch,
          "parent must have one entry per node");
  check(kernels::tree_conv1d_can_implement(P));
  launch_ssm(
      P, [](const auto& q) { return kernels::tree_conv1d_workspace_size(q); },
      [](const auto&... a) { return kernels::tree_conv1d(a...); }, status_out, workspace, stream, sync);
}

std::size_t conv1d_ws_size() { return device_scratch::bytes(0, ssm_staging()); }

template <class T>
void bind_ssm_typed(nb::module_& m, const char* scan_name, const char* conv_name) {
  using nb::arg;
  m.def(scan_name, &scan<T>, arg("parent"), arg("x"), arg("dt"), arg("A"), arg("B"), arg("C"), arg("D").none(),
        arg("dt_bias").none(), arg("z").none(), arg("h0").none(), arg("dt_softplus"), arg("dt_min"), arg("dt_max"),
        arg("y").noconvert(), arg("states").noconvert().none(), arg("status").noconvert().none(),
        arg("workspace").noconvert().none(), arg("stream"), arg("sync"));
  m.def(conv_name, &conv1d<T>, arg("parent"), arg("x"), arg("weight"), arg("bias").none(), arg("conv_state").none(),
        arg("silu"), arg("out").noconvert(), arg("status").noconvert().none(), arg("workspace").noconvert().none(),
        arg("stream"), arg("sync"));
}

// ---------------------------------------------------------------------------
// the peers' batch entry points (kernels/interop.hpp): SGLang's layouts,
// int64 trees and ids, int32 outputs; per-request codes in request_status
// ---------------------------------------------------------------------------

using dev_i64_2d = dev_nd<const std::int64_t, 2>;

bool dense_rows(const dev_i64_2d& a, std::size_t rows, std::size_t cols) {
  return a.shape(0) == rows && a.shape(1) == cols && (cols <= 1 || a.stride(1) == 1) &&
         (rows <= 1 || static_cast<std::size_t>(a.stride(0)) == cols);
}

sglang_tree_batch<std::int64_t> dev_sglang_batch(device_guard& g, const dev_i64_2d& candidates,
                                                 const dev_i64_2d& retrive_index, const dev_i64_2d& next_token,
                                                 const dev_i64_2d& next_sibling) {
  g.add(candidates, "candidates");
  g.add(retrive_index, "retrive_index");
  g.add(next_token, "retrive_next_token");
  g.add(next_sibling, "retrive_next_sibling");
  const std::size_t B = candidates.shape(0), n = candidates.shape(1);
  require(dense_rows(candidates, B, n) && dense_rows(retrive_index, B, n) && dense_rows(next_token, B, n) &&
              dense_rows(next_sibling, B, n),
          status_code::size_mismatch,
          "candidates, retrive_index, retrive_next_token and retrive_next_sibling must be dense "
          "[batch_size][num_draft_tokens] arrays");
  require(B <= static_cast<std::size_t>(INT32_MAX) && n <= static_cast<std::size_t>(INT32_MAX),
          status_code::invalid_argument, "batch too large");
  return {static_cast<std::int32_t>(B),
          static_cast<std::int32_t>(n),
          candidates.data(),
          retrive_index.data(),
          next_token.data(),
          next_sibling.data()};
}

sglang_outputs<std::int32_t> dev_sglang_out(device_guard& g, const dev1<std::int32_t>& predicts,
                                            const dev_nd<std::int32_t, 2>& accept_index,
                                            const dev1<std::int32_t>& accept_token_num) {
  g.add(predicts, "predicts");
  g.add(accept_index, "accept_index");
  g.add(accept_token_num, "accept_token_num");
  return {span_of(predicts), view_of<2>(accept_index), span_of(accept_token_num)};
}

// Request codes (int32, one per request) and optional int64 per-depth
// counters (added to atomically; int64 and unsigned long long share bits).
struct dev_codes {
  std::int32_t* status = nullptr;
  unsigned long long* per_depth = nullptr;
  std::int32_t depth_counters = 0;
};

dev_codes codes_of(device_guard& g, std::size_t B, const dev1<std::int32_t>& request_status,
                   const std::optional<dev1<std::int64_t>>& accepted_per_depth) {
  g.add(request_status, "request_status");
  g.add(accepted_per_depth, "accepted_per_depth");
  require(request_status.size() >= B, status_code::size_mismatch, "request_status needs one entry per request");
  require(!accepted_per_depth ||
              (accepted_per_depth->size() >= 1 && accepted_per_depth->size() <= static_cast<std::size_t>(INT32_MAX)),
          status_code::invalid_argument, "accepted_per_depth needs at least one counter");
  dev_codes c;
  c.status = request_status.data();
  if (accepted_per_depth) {
    c.per_depth = reinterpret_cast<unsigned long long*>(accepted_per_depth->data());
    c.depth_counters = static_cast<std::int32_t>(accepted_per_depth->size());
  }
  return c;
}

std::size_t sglang_tree_ws_size(std::int64_t B, std::int64_t n) {
  kernels::sglang_greedy_params<std::int64_t, std::int32_t> P;
  P.tree.batch_size = static_cast<std::int32_t>(B);
  P.tree.num_draft_tokens = static_cast<std::int32_t>(n);
  return device_scratch::bytes(kernels::sglang_verify_tree_greedy_workspace_size(P), 0);
}

void sglang_greedy(const dev_i64_2d& candidates, const dev_i64_2d& retrive_index, const dev_i64_2d& next_token,
                   const dev_i64_2d& next_sibling, const dev1<const std::int64_t>& target_predict,
                   std::int32_t num_speculative_tokens, const dev1<std::int32_t>& predicts,
                   const dev_nd<std::int32_t, 2>& accept_index, const dev1<std::int32_t>& accept_token_num,
                   const std::optional<dev1<std::int64_t>>& accepted_per_depth,
                   const dev1<std::int32_t>& request_status, const std::optional<dev_bytes>& workspace,
                   std::uintptr_t stream) {
  device_guard g;
  kernels::sglang_greedy_params<std::int64_t, std::int32_t> P;
  P.tree = dev_sglang_batch(g, candidates, retrive_index, next_token, next_sibling);
  g.add(target_predict, "target_predict");
  g.add(workspace, "workspace");
  P.target_predict = span_of(target_predict);
  P.num_speculative_tokens = num_speculative_tokens;
  P.out = dev_sglang_out(g, predicts, accept_index, accept_token_num);
  const dev_codes c = codes_of(g, candidates.shape(0), request_status, accepted_per_depth);
  P.request_status = c.status;
  P.accepted_per_depth = c.per_depth;
  P.depth_counters = c.depth_counters;
  check(kernels::sglang_verify_tree_greedy_can_implement(P));
  const cudaStream_t s = stream_of(stream);
  device_scratch ws(kernels::sglang_verify_tree_greedy_workspace_size(P), 0, workspace, s);
  check(kernels::sglang_verify_tree_greedy(P, ws.kernel(), ws.kernel_bytes(), s));
}

void sglang_sampling(const dev_i64_2d& candidates, const dev_i64_2d& retrive_index, const dev_i64_2d& next_token,
                     const dev_i64_2d& next_sibling, const dev_nd<const float, 2>& target_probs,
                     const dev1<const float>& coins, const dev1<const float>& final_coins,
                     std::int32_t num_speculative_tokens, float threshold_single, float threshold_acc,
                     const dev1<std::int32_t>& predicts, const dev_nd<std::int32_t, 2>& accept_index,
                     const dev1<std::int32_t>& accept_token_num,
                     const std::optional<dev1<std::int64_t>>& accepted_per_depth,
                     const dev1<std::int32_t>& request_status, const std::optional<dev_bytes>& workspace,
                     std::uintptr_t stream) {
  device_guard g;
  kernels::sglang_sampling_params<std::int64_t, std::int32_t> P;
  P.tree = dev_sglang_batch(g, candidates, retrive_index, next_token, next_sibling);
  g.add(target_probs, "target_probs");
  g.add(coins, "coins");
  g.add(final_coins, "final_coins");
  g.add(workspace, "workspace");
  P.target_probs = view_of<2>(target_probs);
  P.coins = span_of(coins);
  P.final_coins = span_of(final_coins);
  P.num_speculative_tokens = num_speculative_tokens;
  P.thresholds = sglang_thresholds{threshold_single, threshold_acc};
  P.out = dev_sglang_out(g, predicts, accept_index, accept_token_num);
  const dev_codes c = codes_of(g, candidates.shape(0), request_status, accepted_per_depth);
  P.request_status = c.status;
  P.accepted_per_depth = c.per_depth;
  P.depth_counters = c.depth_counters;
  check(kernels::sglang_tree_sampling_target_only_can_implement(P));
  const cudaStream_t s = stream_of(stream);
  device_scratch ws(kernels::sglang_tree_sampling_target_only_workspace_size(P), 0, workspace, s);
  check(kernels::sglang_tree_sampling_target_only(P, ws.kernel(), ws.kernel_bytes(), s));
}

std::size_t sglang_verify_ws_size(std::int64_t B, std::int64_t n, std::int64_t vocab) {
  kernels::sglang_verify_params<std::int64_t, std::int32_t> P;
  P.in.tree.batch_size = static_cast<std::int32_t>(B);
  P.in.tree.num_draft_tokens = static_cast<std::int32_t>(n);
  P.in.p.extent[1] = vocab;
  return device_scratch::bytes(kernels::sglang_verify_tree_workspace_size(P),
                               static_cast<std::size_t>(std::max<std::int64_t>(B, 0)) * sizeof(verify_params));
}

void sglang_verify(const dev_i64_2d& candidates, const dev_i64_2d& retrive_index, const dev_i64_2d& next_token,
                   const dev_i64_2d& next_sibling, const dev_nd<const float, 2>& p,
                   const std::optional<dev_nd<const float, 2>>& q, const in1<std::int32_t>& modes,
                   const in1<std::uint64_t>& seeds, const in1<std::uint32_t>& requests,
                   const in1<std::uint32_t>& rounds, float eps, float delta, float tol,
                   const std::optional<dev_nd<const double, 2>>& uniforms, std::int32_t num_speculative_tokens,
                   const dev1<std::int32_t>& predicts, const dev_nd<std::int32_t, 2>& accept_index,
                   const dev1<std::int32_t>& accept_token_num,
                   const std::optional<dev1<std::int64_t>>& accepted_per_depth,
                   const dev1<std::int32_t>& request_status, const std::optional<dev_bytes>& workspace,
                   std::uintptr_t stream) {
  device_guard g;
  kernels::sglang_verify_params<std::int64_t, std::int32_t> P;
  P.in.tree = dev_sglang_batch(g, candidates, retrive_index, next_token, next_sibling);
  g.add(p, "p");
  g.add(q, "q");
  g.add(uniforms, "uniforms");
  g.add(workspace, "workspace");
  const std::size_t B = candidates.shape(0), slots = B * candidates.shape(1);
  require(modes.size() == B && seeds.size() == B && requests.size() == B && rounds.size() == B,
          status_code::size_mismatch, "modes, seeds, requests and rounds need one entry per request");
  P.in.p = view_of<2>(p);
  if (q) P.in.q = view_of<2>(*q);
  if (uniforms) {
    require(uniforms->shape(0) >= slots && uniforms->shape(1) > 0 &&
                uniforms->shape(1) <= static_cast<std::size_t>(INT32_MAX) && uniforms->stride(1) == 1 &&
                (uniforms->shape(0) <= 1 || static_cast<std::size_t>(uniforms->stride(0)) == uniforms->shape(1)),
            status_code::invalid_argument, "uniforms must be a dense [batch_size * num_draft_tokens][draws] array");
    P.in.uniforms = uniforms->data();
    P.in.draws_per_node = static_cast<std::int32_t>(uniforms->shape(1));
  }
  P.in.num_speculative_tokens = num_speculative_tokens;
  P.out = dev_sglang_out(g, predicts, accept_index, accept_token_num);
  const dev_codes c = codes_of(g, B, request_status, accepted_per_depth);
  P.request_status = c.status;
  P.accepted_per_depth = c.per_depth;
  P.depth_counters = c.depth_counters;
  std::vector<verify_params> vps(B);
  for (std::size_t r = 0; r < B; ++r) {
    vps[r].mode = static_cast<verify_mode>(modes.data()[r]);
    vps[r].seed = seeds.data()[r];
    vps[r].request = requests.data()[r];
    vps[r].round = rounds.data()[r];
    vps[r].typical_epsilon = eps;
    vps[r].typical_delta = delta;
    vps[r].normalization_tolerance = tol;
  }
  verify_params placeholder{};
  P.in.params = &placeholder;  // host address for the host checks only; the staged copy is launched
  check(kernels::sglang_verify_tree_can_implement(P));
  if (B == 0) return;
  const cudaStream_t s = stream_of(stream);
  device_scratch ws(kernels::sglang_verify_tree_workspace_size(P), B * sizeof(verify_params), workspace, s);
  P.in.params = ws.stage(0, vps.data(), B);
  ws.upload();
  check(kernels::sglang_verify_tree(P, ws.kernel(), ws.kernel_bytes(), s));
}

std::size_t build_tree_ws_size(std::int64_t B, std::int64_t n) {
  kernels::sglang_build_tree_params P;
  P.in.batch_size = static_cast<std::int32_t>(B);
  P.in.draft_token_num = static_cast<std::int32_t>(n);
  return device_scratch::bytes(kernels::sglang_build_tree_workspace_size(P), 0);
}

void build_tree(const dev_i64_2d& parent_list, const dev_i64_2d& selected_index,
                const dev1<const std::int64_t>& verified_seq_len, std::int32_t topk, std::int32_t depth,
                std::int32_t draft_token_num, std::int32_t mode, const dev1<std::uint8_t>& tree_mask,
                const dev1<std::int64_t>& positions, const dev1<std::int64_t>& retrive_index,
                const dev1<std::int64_t>& retrive_next_token, const dev1<std::int64_t>& retrive_next_sibling,
                const dev1<std::int32_t>& request_status, const std::optional<dev_bytes>& workspace,
                std::uintptr_t stream) {
  device_guard g;
  g.add(parent_list, "parent_list");
  g.add(selected_index, "selected_index");
  g.add(verified_seq_len, "verified_seq_len");
  g.add(tree_mask, "tree_mask");
  g.add(positions, "positions");
  g.add(retrive_index, "retrive_index");
  g.add(retrive_next_token, "retrive_next_token");
  g.add(retrive_next_sibling, "retrive_next_sibling");
  g.add(workspace, "workspace");
  const std::size_t B = verified_seq_len.size();
  require(topk >= 1 && depth >= 1 && draft_token_num >= 1, status_code::invalid_argument,
          "topk, depth and draft_token_num must be >= 1");
  require(B <= static_cast<std::size_t>(INT32_MAX), status_code::invalid_argument, "batch too large");
  const auto n = static_cast<std::size_t>(draft_token_num);
  require(dense_rows(parent_list, B, static_cast<std::size_t>(topk) * static_cast<std::size_t>(depth - 1) + 1),
          status_code::size_mismatch, "parent_list must be a dense [batch][topk * (depth - 1) + 1] array");
  require(dense_rows(selected_index, B, n - 1), status_code::size_mismatch,
          "selected_index must be a dense [batch][draft_token_num - 1] array");
  for (const std::size_t sz :
       {positions.size(), retrive_index.size(), retrive_next_token.size(), retrive_next_sibling.size()})
    require(sz >= B * n, status_code::size_mismatch,
            "positions and the retrive_* outputs need batch * draft_token_num entries");
  const dev_codes c = codes_of(g, B, request_status, std::nullopt);
  kernels::sglang_build_tree_params P;
  P.in.batch_size = static_cast<std::int32_t>(B);
  P.in.topk = topk;
  P.in.depth = depth;
  P.in.draft_token_num = draft_token_num;
  P.in.parent_list = parent_list.data();
  P.in.selected_index = selected_index.data();
  P.in.verified_seq_len = verified_seq_len.data();
  P.in.mode = static_cast<sglang_tree_mask_mode>(mode);
  P.out.tree_mask = tree_mask.data();
  P.out.tree_mask_bytes = static_cast<std::int64_t>(tree_mask.size());
  P.out.positions = positions.data();
  P.out.retrive_index = retrive_index.data();
  P.out.retrive_next_token = retrive_next_token.data();
  P.out.retrive_next_sibling = retrive_next_sibling.data();
  P.request_status = c.status;
  check(kernels::sglang_build_tree_can_implement(P));
  const cudaStream_t s = stream_of(stream);
  device_scratch ws(kernels::sglang_build_tree_workspace_size(P), 0, workspace, s);
  check(kernels::sglang_build_tree(P, ws.kernel(), ws.kernel_bytes(), s));
}

void chain_counts(const dev_nd<const token_id, 2>& drafts, const dev_nd<const float, 3>& target_probs,
                  const dev_nd<const float, 3>& draft_probs, const dev_nd<const float, 2>& coins,
                  const dev1<std::int32_t>& accepted_num, const dev1<std::int32_t>& emitted_num,
                  const dev1<std::int32_t>& request_status, std::uintptr_t stream) {
  device_guard g;
  g.add(drafts, "draft_token_ids");
  g.add(target_probs, "target_probs");
  g.add(draft_probs, "draft_probs");
  g.add(coins, "coins");
  g.add(accepted_num, "accepted_num");
  g.add(emitted_num, "emitted_num");
  const std::size_t B = drafts.shape(0), gamma = drafts.shape(1);
  require(B <= static_cast<std::size_t>(INT32_MAX) && gamma <= static_cast<std::size_t>(INT32_MAX),
          status_code::invalid_argument, "batch too large");
  require((gamma <= 1 || drafts.stride(1) == 1) && (B <= 1 || static_cast<std::size_t>(drafts.stride(0)) == gamma),
          status_code::size_mismatch, "draft_token_ids must be a dense [batch][gamma] array");
  require(coins.shape(0) >= B && coins.shape(1) >= gamma && (coins.shape(1) <= 1 || coins.stride(1) == 1),
          status_code::size_mismatch, "coins must be [batch][>= gamma] with contiguous rows");
  require(accepted_num.size() >= B && emitted_num.size() >= B, status_code::size_mismatch,
          "accepted_num and emitted_num need one entry per request");
  const dev_codes c = codes_of(g, B, request_status, std::nullopt);
  kernels::chain_counts_params P;
  P.batch.batch_size = static_cast<std::int32_t>(B);
  P.batch.num_speculative_tokens = static_cast<std::int32_t>(gamma);
  P.batch.draft_token_ids = drafts.data();
  P.batch.target_probs = view_of<3>(target_probs);
  P.batch.draft_probs = view_of<3>(draft_probs);
  P.batch.coins = coins.data();
  P.batch.coins_stride =
      B <= 1 ? static_cast<std::int64_t>(coins.shape(1)) : static_cast<std::int64_t>(coins.stride(0));
  P.batch.accepted_num = accepted_num.data();
  P.batch.emitted_num = emitted_num.data();
  P.request_status = c.status;
  check(kernels::chain_acceptance_counts_batch_can_implement(P));
  check(kernels::chain_acceptance_counts_batch(P, nullptr, 0, stream_of(stream)));
}

void synchronize(std::uintptr_t stream) { check(kernels::synchronize(stream_of(stream))); }

}  // namespace

void bind_cuda(nb::module_& m) {
  using nb::arg;
  m.def("cuda_device_count", &kernels::device_count);
  m.def("cuda_synchronize", &synchronize, arg("stream"));
  m.def("cuda_tree_masks_batched32", &tree_masks<std::uint32_t>, arg("parents"), arg("offsets"),
        arg("cache_len").none(), arg("masks").noconvert(), arg("positions").noconvert().none(),
        arg("tree_status").noconvert(), arg("max_nodes"), arg("stream"));
  m.def("cuda_tree_masks_batched64", &tree_masks<std::uint64_t>, arg("parents"), arg("offsets"),
        arg("cache_len").none(), arg("masks").noconvert(), arg("positions").noconvert().none(),
        arg("tree_status").noconvert(), arg("max_nodes"), arg("stream"));
  m.def("cuda_verify_batch_workspace_size", &verify_ws_size, arg("num_requests"), arg("vocab"), arg("max_nodes"),
        arg("upload_offsets"));
  m.def("cuda_verify_batch", &verify, arg("offsets"), arg("parent"), arg("tokens"), arg("p"), arg("q").none(),
        arg("modes"), arg("seeds"), arg("requests"), arg("rounds"), arg("typical_epsilon"), arg("typical_delta"),
        arg("normalization_tolerance"), arg("uniforms").none(), arg("paths").noconvert(), arg("tokens_out").noconvert(),
        arg("results").noconvert(), arg("accepted_per_depth").noconvert().none(), arg("workspace").noconvert().none(),
        arg("stream"));
  m.def("cuda_prune_batch_workspace_size", &prune_ws_size, arg("num_requests"), arg("total_nodes"),
        arg("upload_offsets"));
  m.def("cuda_prune_batch", &prune_batch, arg("parent"), arg("score"), arg("offsets"), arg("budgets").none(),
        arg("uniform_budget"), arg("new_index").noconvert(), arg("kept").noconvert(), arg("request_status").noconvert(),
        arg("workspace").noconvert().none(), arg("stream"));
  m.def("cuda_commit_kv_workspace_size", &kv_ws_size, arg("num_tensors"));
  m.def("cuda_commit_kv", &commit_kv, arg("caches").noconvert(), arg("layout"), arg("cache_len"), arg("keep_offsets"),
        arg("keep"), arg("block_table").none(), arg("blocks_used").none(), arg("status").noconvert().none(),
        arg("workspace").noconvert().none(), arg("stream"), arg("sync"));
  m.def("kv_commit_check", &kv_commit_check, arg("status_word"));
  m.def("cuda_sglang_tree_workspace_size", &sglang_tree_ws_size, arg("batch_size"), arg("num_draft_tokens"));
  m.def("cuda_sglang_verify_tree_greedy", &sglang_greedy, arg("candidates"), arg("retrive_index"),
        arg("retrive_next_token"), arg("retrive_next_sibling"), arg("target_predict"), arg("num_speculative_tokens"),
        arg("predicts").noconvert(), arg("accept_index").noconvert(), arg("accept_token_num").noconvert(),
        arg("accepted_per_depth").noconvert().none(), arg("request_status").noconvert(),
        arg("workspace").noconvert().none(), arg("stream"));
  m.def("cuda_sglang_tree_sampling_target_only", &sglang_sampling, arg("candidates"), arg("retrive_index"),
        arg("retrive_next_token"), arg("retrive_next_sibling"), arg("target_probs"), arg("coins"), arg("final_coins"),
        arg("num_speculative_tokens"), arg("threshold_single"), arg("threshold_acc"), arg("predicts").noconvert(),
        arg("accept_index").noconvert(), arg("accept_token_num").noconvert(),
        arg("accepted_per_depth").noconvert().none(), arg("request_status").noconvert(),
        arg("workspace").noconvert().none(), arg("stream"));
  m.def("cuda_sglang_verify_tree_workspace_size", &sglang_verify_ws_size, arg("batch_size"), arg("num_draft_tokens"),
        arg("vocab"));
  m.def("cuda_sglang_verify_tree", &sglang_verify, arg("candidates"), arg("retrive_index"), arg("retrive_next_token"),
        arg("retrive_next_sibling"), arg("p"), arg("q").none(), arg("modes"), arg("seeds"), arg("requests"),
        arg("rounds"), arg("typical_epsilon"), arg("typical_delta"), arg("normalization_tolerance"),
        arg("uniforms").none(), arg("num_speculative_tokens"), arg("predicts").noconvert(),
        arg("accept_index").noconvert(), arg("accept_token_num").noconvert(),
        arg("accepted_per_depth").noconvert().none(), arg("request_status").noconvert(),
        arg("workspace").noconvert().none(), arg("stream"));
  m.def("cuda_sglang_build_tree_workspace_size", &build_tree_ws_size, arg("batch_size"), arg("draft_token_num"));
  m.def("cuda_sglang_build_tree", &build_tree, arg("parent_list"), arg("selected_index"), arg("verified_seq_len"),
        arg("topk"), arg("depth"), arg("draft_token_num"), arg("mode"), arg("tree_mask").noconvert(),
        arg("positions").noconvert(), arg("retrive_index").noconvert(), arg("retrive_next_token").noconvert(),
        arg("retrive_next_sibling").noconvert(), arg("request_status").noconvert(), arg("workspace").noconvert().none(),
        arg("stream"));
  m.def("cuda_chain_acceptance_counts_batch", &chain_counts, arg("draft_token_ids"), arg("target_probs"),
        arg("draft_probs"), arg("coins"), arg("accepted_num").noconvert(), arg("emitted_num").noconvert(),
        arg("request_status").noconvert(), arg("stream"));

  m.def("cuda_tree_scan_workspace_size_f32", &scan_ws_size<float>, arg("nodes"), arg("heads"), arg("headdim"),
        arg("dstate"), arg("with_states"));
  m.def("cuda_tree_scan_workspace_size_f64", &scan_ws_size<double>, arg("nodes"), arg("heads"), arg("headdim"),
        arg("dstate"), arg("with_states"));
  m.def("cuda_tree_conv1d_workspace_size", &conv1d_ws_size);
  bind_ssm_typed<float>(m, "cuda_tree_scan_f32", "cuda_tree_conv1d_f32");
  bind_ssm_typed<double>(m, "cuda_tree_scan_f64", "cuda_tree_conv1d_f64");
}

}  // namespace specdec::python
