// KV cache: keep indices of an accepted path (one request or a batch) and the
// in-place KV commit on the caller's cache tensors, contiguous or paged, of
// any element type (moved as raw bits); with the kernels, the same commit
// on CUDA tensors on the caller's stream.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "common.hpp"
#include "common_cuda.hpp"
#include "specdec/cache/keep_indices.hpp"
#include "specdec/cache/kv_commit.hpp"
#if defined(SPECDEC_PYTHON_HAS_CUDA)
#include "specdec/kernels/cache.hpp"
#endif

namespace specdec::python {
namespace {

std::int32_t keep_one(const in1<node_id>& parent, const in1<node_id>& path, const in1<std::int32_t>& slot_of_node,
                      position_id cache_len, const out1<position_id>& keep) {
  std::int32_t count = 0;
  check(keep_indices_from_path(span_of(parent), span_of(path), span_of(slot_of_node), cache_len, span_of(keep), count));
  return count;
}

void keep_batch(const in1<node_id>& parent, const in1<std::int32_t>& tree_offsets,
                const in1<std::int32_t>& slot_of_node, const in1<node_id>& path, const in1<std::int32_t>& path_offsets,
                const in1<position_id>& cache_len, const out1<position_id>& keep,
                const out1<std::int32_t>& keep_offsets) {
  check(keep_indices_batch(span_of(parent), span_of(tree_offsets), span_of(slot_of_node), span_of(path),
                           span_of(path_offsets), span_of(cache_len), span_of(keep), span_of(keep_offsets)));
}

// The keep lists of a verified batch (keep_indices_from_results), from host
// or CUDA arrays alike (A1: 1-D int arrays, A2: 2-D; only shapes, strides
// and pointers are read here): results are verify_batch's R x 4 int32 rows.
template <template <class> class In1, template <class> class Out1, template <class, int> class In2>
keep_from_results_batch keep_results_args(const In1<std::int32_t>& tree_offsets, const In1<node_id>& parent,
                                          const std::optional<In1<std::int32_t>>& slot_of_node,
                                          const In2<node_id, 2>& paths, const In2<std::int32_t, 2>& results,
                                          const In1<position_id>& cache_len, const Out1<position_id>& keep,
                                          const Out1<std::int32_t>& keep_offsets, const Out1<std::int32_t>& status) {
  static_assert(sizeof(verify_result) == 4 * sizeof(std::int32_t) && std::is_standard_layout_v<verify_result>);
  const std::size_t R = cache_len.size();
  require(R <= static_cast<std::size_t>(INT32_MAX) && parent.size() <= static_cast<std::size_t>(INT32_MAX),
          status_code::invalid_argument, "too many requests or nodes");
  require(tree_offsets.size() == R + 1, status_code::size_mismatch, "tree_offsets needs R + 1 entries");
  require(!slot_of_node || slot_of_node->size() == parent.size(), status_code::size_mismatch,
          "slot_of_node needs one entry per node");
  require(paths.shape(0) == R && paths.shape(1) >= 1 && paths.shape(1) <= static_cast<std::size_t>(INT32_MAX) &&
              dense_rows(paths, R, paths.shape(1)),
          status_code::size_mismatch, "paths must be verify_batch's dense R x L rows");
  require(dense_rows(results, R, 4), status_code::size_mismatch,
          "results must be verify_batch's dense R x 4 int32 rows");
  require(keep.size() >= parent.size(), status_code::buffer_too_small, "keep needs one entry per node");
  require(keep_offsets.size() >= R + 1 && status.size() >= R, status_code::buffer_too_small,
          "keep_offsets needs R + 1 entries and status R");
  keep_from_results_batch b;
  b.num_requests = static_cast<std::int32_t>(R);
  b.tree_offsets = tree_offsets.data();
  b.parent = parent.data();
  b.slot_of_node = slot_of_node ? slot_of_node->data() : nullptr;
  b.node_capacity = static_cast<std::int32_t>(parent.size());
  b.paths = paths.data();
  b.path_stride = static_cast<std::int32_t>(paths.shape(1));
  b.results = reinterpret_cast<const verify_result*>(results.data());
  b.cache_len = cache_len.data();
  b.keep = keep.data();
  b.keep_offsets = keep_offsets.data();
  b.request_status = status.data();
  return b;
}

void keep_from_results(const in1<std::int32_t>& tree_offsets, const in1<node_id>& parent,
                       const std::optional<in1<std::int32_t>>& slot_of_node, const in_nd<node_id, 2>& paths,
                       const in_nd<std::int32_t, 2>& results, const in1<position_id>& cache_len,
                       const out1<position_id>& keep, const out1<std::int32_t>& keep_offsets,
                       const out1<std::int32_t>& status) {
  check(keep_indices_from_results(keep_results_args<in1, out1, in_nd>(tree_offsets, parent, slot_of_node, paths,
                                                                      results, cache_len, keep, keep_offsets, status)));
}

using any_cpu = nb::ndarray<nb::device::cpu>;

// A thread pool owned by one commit_kv call (kv_commit_executor): threads - 1
// workers and the calling thread take (tensor, request) items from a shared
// counter and are joined before the call returns. Items write disjoint
// memory, so the bytes written do not depend on the schedule.
struct call_pool {
  std::int32_t threads = 1;

  static void parallel_for(void* self, std::int64_t n, kv_commit_executor::body_fn body, void* body_context) {
    const auto& pool = *static_cast<const call_pool*>(self);
    std::atomic<std::int64_t> next{0};
    const auto work = [&]() noexcept {
      for (std::int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;
           i = next.fetch_add(1, std::memory_order_relaxed))
        body(body_context, i);
    };
    std::vector<std::thread> workers;
    const std::int64_t extra = std::min<std::int64_t>(pool.threads, n) - 1;
    workers.reserve(static_cast<std::size_t>(std::max<std::int64_t>(extra, 0)));
    for (std::int64_t k = 0; k < extra; ++k) {
      // commit_kv is noexcept: a thread that cannot start leaves its share
      // to the others (the counter hands every item out exactly once).
      try {
        workers.emplace_back(work);
      } catch (const std::system_error&) {
        break;
      }
    }
    work();
    for (auto& t : workers) t.join();
  }
};

template <class T>
void commit_typed(const std::vector<any_cpu>& caches, const std::string& layout, const kv_position_map& base_map,
                  bool paged, std::span<const position_id> cache_len, std::span<const std::int32_t> keep_offsets,
                  std::span<const position_id> keep, std::span<std::int32_t> request_status, bool check_now,
                  std::int32_t threads) {
  std::vector<kv_tensor<T>> ts;
  kv_position_map map = base_map;
  for (std::size_t i = 0; i < caches.size(); ++i) {
    std::int64_t positions = 0, rows = 0;
    ts.push_back(describe_kv<T>(caches[i], layout, positions, rows));
    // Every tensor must agree on the positions axis: the map is shared.
    if (i == 0) {
      if (paged) {
        map.page_size = positions;
        map.num_pages = rows;
      } else {
        map.capacity = positions;
      }
    }
    const std::int64_t want_pos = paged ? map.page_size : map.capacity;
    require(positions == want_pos && (!paged || rows == map.num_pages), status_code::size_mismatch,
            "every cache tensor needs the same positions (and pages)");
  }
  call_pool pool{threads};
  kv_commit_executor exec;
  if (threads > 1) exec = {&call_pool::parallel_for, &pool};
  // One status per request, as the CUDA kernel: the caller's array, else
  // a local one (then the first failure raises).
  std::vector<std::int32_t> own;
  if (request_status.empty() && !cache_len.empty()) {
    own.resize(cache_len.size());
    request_status = own;
  }
  status s;
  {
    // The caller's arrays stay referenced by the call's arguments; other
    // Python threads may run while the bytes move.
    nb::gil_scoped_release unlocked;
    s = commit_kv_per_request<T>(std::span<const kv_tensor<T>>(ts), map, cache_len, keep_offsets, keep, request_status,
                                 exec);
  }
  if (check_now || s.code() == status_code::size_mismatch) check(s);
}

void commit(const std::vector<any_cpu>& caches, const std::string& layout, const in1<position_id>& cache_len,
            const in1<std::int32_t>& keep_offsets, const in1<position_id>& keep,
            const std::optional<in_nd<std::int32_t, 2>>& block_table,
            const std::optional<in1<std::int32_t>>& blocks_used, const std::optional<out1<std::int32_t>>& status_out,
            bool check_now, std::int32_t threads) {
  require(!caches.empty(), status_code::empty_input, "no cache tensors");
  require(!status_out || status_out->size() == cache_len.size(), status_code::size_mismatch,
          "status needs one entry per request");
  if (threads == 0) threads = static_cast<std::int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  require(threads >= 1 && threads <= 1024, status_code::invalid_argument, "threads must be in [0, 1024]");
  const std::size_t bytes = caches[0].itemsize();
  for (const auto& c : caches)
    require(c.itemsize() == bytes, status_code::invalid_argument, "cache tensors must share one element size");
  kv_position_map map;
  const bool paged = block_table.has_value();
  if (paged) {
    require(block_table->shape(1) == 0 || block_table->stride(1) == 1, status_code::invalid_argument,
            "block_table rows must be contiguous");
    require(block_table->shape(0) >= cache_len.size(), status_code::size_mismatch,
            "block_table needs one row per request");
    require(!blocks_used || blocks_used->size() >= cache_len.size(), status_code::size_mismatch,
            "blocks_used needs one entry per request");
    map = paged_positions(block_table->data(), static_cast<std::int64_t>(block_table->shape(1)), 0, 0,
                          blocks_used ? blocks_used->data() : nullptr);
    map.block_table_stride = static_cast<std::int64_t>(block_table->stride(0));
  }
  const auto cl = span_of(cache_len);
  const auto ko = span_of(keep_offsets);
  const auto kp = span_of(keep);
  const std::span<std::int32_t> st =
      status_out ? std::span<std::int32_t>(status_out->data(), status_out->size()) : std::span<std::int32_t>{};
  // Without a status array the call raises the first failure.
  const bool raise = check_now || !status_out;
  switch (bytes) {
    case 1:
      return commit_typed<std::uint8_t>(caches, layout, map, paged, cl, ko, kp, st, raise, threads);
    case 2:
      return commit_typed<std::uint16_t>(caches, layout, map, paged, cl, ko, kp, st, raise, threads);
    case 4:
      return commit_typed<std::uint32_t>(caches, layout, map, paged, cl, ko, kp, st, raise, threads);
    case 8:
      return commit_typed<std::uint64_t>(caches, layout, map, paged, cl, ko, kp, st, raise, threads);
    default:
      check(make_status(status_code::unsupported, "cache element size must be 1, 2, 4 or 8 bytes"));
  }
}

#if defined(SPECDEC_PYTHON_HAS_CUDA)
// ---- CUDA: the KV commit on the caller's stream -----------------------------

// Bytes before the tensor descriptions: one int32 status per request, 256-byte aligned.
std::size_t kv_status_bytes(std::size_t requests) {
  return (requests * sizeof(std::int32_t) + workspace_alignment - 1) / workspace_alignment * workspace_alignment;
}

std::size_t kv_staging(std::size_t tensors, std::size_t requests) {
  return kv_status_bytes(requests) + tensors * sizeof(kv_tensor<void>);  // statuses first, then the descriptions
}

std::size_t kv_ws_size(std::int64_t tensors, std::int64_t requests) {
  return device_scratch::bytes(0, kv_staging(static_cast<std::size_t>(std::max<std::int64_t>(tensors, 0)),
                                             static_cast<std::size_t>(std::max<std::int64_t>(requests, 0))));
}

// Reads R request statuses after everything enqueued on `stream`; raises the first failure.
void check_request_status(const std::int32_t* device_status, std::size_t R, cudaStream_t stream) {
  std::vector<std::int32_t> codes(R);
  if (R > 0)
    cuda_check(cudaMemcpyAsync(codes.data(), device_status, R * sizeof(std::int32_t), cudaMemcpyDeviceToHost, stream),
               "cudaMemcpyAsync");
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  check(kernels::kv_commit_result(codes));
}

// What a commit knows before its requests: the tensors' descriptions and the
// launch parameters they fix, and how many requests the caches can hold
// (rows of a contiguous cache, rows of the block table).
struct kv_described {
  kernels::kv_commit_params P;
  std::vector<kv_tensor<void>> tensors;
  std::int64_t max_requests = 0;
};

kv_described describe_commit(const std::vector<any_dev>& caches, const std::string& layout,
                             const std::optional<dev_nd<const std::int32_t, 2>>& block_table,
                             const std::optional<dev1<const std::int32_t>>& blocks_used) {
  require(!caches.empty(), status_code::empty_input, "no cache tensors");
  kv_described d;
  auto& P = d.P;
  const std::size_t bytes = caches[0].itemsize();
  for (const auto& c : caches)
    require(c.itemsize() == bytes, status_code::invalid_argument, "cache tensors must share one element size");
  const bool paged = block_table.has_value();
  d.max_requests = INT32_MAX;
  if (paged) {
    require(block_table->shape(1) == 0 || block_table->stride(1) == 1, status_code::invalid_argument,
            "block_table rows must be contiguous");
    d.max_requests = std::min<std::int64_t>(static_cast<std::int64_t>(block_table->shape(0)), INT32_MAX);
    if (blocks_used) d.max_requests = std::min(d.max_requests, static_cast<std::int64_t>(blocks_used->size()));
    P.map = paged_positions(block_table->data(), static_cast<std::int64_t>(block_table->shape(1)), 0, 0,
                            blocks_used ? blocks_used->data() : nullptr);
    P.map.block_table_stride = static_cast<std::int64_t>(block_table->stride(0));
  }
  std::int64_t max_layers = 1, max_heads = 1;
  for (std::size_t i = 0; i < caches.size(); ++i) {
    std::int64_t positions = 0, rows = 0;
    d.tensors.push_back(describe_kv<void>(caches[i], layout, positions, rows));
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
    if (!paged) d.max_requests = std::min(d.max_requests, rows);
    max_layers = std::max(max_layers, d.tensors.back().layers);
    max_heads = std::max(max_heads, d.tensors.back().heads);
  }
  require(caches.size() <= static_cast<std::size_t>(INT32_MAX) && max_layers <= INT32_MAX && max_heads <= INT32_MAX,
          status_code::unsupported, "too many tensors, layers or heads");
  P.num_tensors = static_cast<std::int32_t>(d.tensors.size());
  P.elem_bytes = static_cast<std::int32_t>(bytes);
  P.max_layers = static_cast<std::int32_t>(max_layers);
  P.max_heads = static_cast<std::int32_t>(max_heads);
  return d;
}

// Points P at this call's requests after checking them against what the
// caches hold.
void set_requests(kernels::kv_commit_params& P, std::int64_t max_requests, const dev1<const position_id>& cache_len,
                  const dev1<const std::int32_t>& keep_offsets, const dev1<const position_id>& keep) {
  const std::size_t R = cache_len.size();
  require(keep_offsets.size() == R + 1, status_code::size_mismatch, "keep_offsets needs R + 1 entries");
  require(static_cast<std::int64_t>(R) <= max_requests, status_code::size_mismatch,
          P.map.paged() ? "block_table (and blocks_used) need one row per request"
                        : "a contiguous cache needs one row per request");
  P.batch.num_requests = static_cast<std::int32_t>(R);
  P.batch.cache_len = cache_len.data();
  P.batch.keep_offsets = keep_offsets.data();
  P.batch.keep = keep.size() > 0 ? keep.data() : nullptr;
  P.total_keep = static_cast<std::int64_t>(keep.size());
}

// Launches P (request statuses already pointed to) and, with `check`,
// waits and raises the first request's failure.
void launch_commit(const kernels::kv_commit_params& P, cudaStream_t s, bool check_now) {
  check(kernels::commit_kv(P, nullptr, 0, s));
  if (check_now) check_request_status(P.request_status, static_cast<std::size_t>(P.batch.num_requests), s);
}

void cuda_commit_kv(const std::vector<any_dev>& caches, const std::string& layout,
                    const dev1<const position_id>& cache_len, const dev1<const std::int32_t>& keep_offsets,
                    const dev1<const position_id>& keep,
                    const std::optional<dev_nd<const std::int32_t, 2>>& block_table,
                    const std::optional<dev1<const std::int32_t>>& blocks_used,
                    const std::optional<dev1<std::int32_t>>& status_out, const std::optional<dev_bytes>& workspace,
                    std::uintptr_t stream, bool check_now) {
  device_guard g;
  for (const auto& c : caches) g.add(c, "a cache tensor");
  g.add(cache_len, "cache_len", keep_offsets, "keep_offsets", keep, "keep", block_table, "block_table", blocks_used,
        "blocks_used", status_out, "status", workspace, "workspace");
  const std::size_t R = cache_len.size();
  require(!status_out || status_out->size() == R, status_code::size_mismatch, "status needs one entry per request");
  kv_described d = describe_commit(caches, layout, block_table, blocks_used);
  set_requests(d.P, d.max_requests, cache_len, keep_offsets, keep);
  const cudaStream_t s = stream_of(stream);
  device_scratch ws(0, kv_staging(d.tensors.size(), R), workspace, s);
  // The validation kernel writes every request's status: the staged array is a slot.
  d.P.request_status = status_out ? status_out->data() : ws.slot<std::int32_t>(0);
  d.P.tensors = ws.stage(kv_status_bytes(R), d.tensors.data(), d.tensors.size());
  if (cache_len.size() > 0) ws.upload();
  launch_commit(d.P, s, check_now);
}

// A commit prepared for fixed cache tensors: their descriptions are uploaded
// once, into device memory this object owns, so each call only points the
// launch at its requests: nothing staged, allocated or waited for (unless
// asked), and the call can be captured in a CUDA graph. The tensors, block
// table and blocks_used must outlive it (the Python wrapper holds them);
// their contents may change between calls, their addresses may not.
class prepared_kv_commit {
 public:
  prepared_kv_commit(const std::vector<any_dev>& caches, const std::string& layout,
                     const std::optional<dev_nd<const std::int32_t, 2>>& block_table,
                     const std::optional<dev1<const std::int32_t>>& blocks_used) {
    require(!caches.empty(), status_code::empty_input, "no cache tensors");
    device_guard g;
    for (const auto& c : caches) g.add(c, "a cache tensor");
    g.add(block_table, "block_table", blocks_used, "blocks_used");
    cuda_check(cudaGetDevice(&device_), "cudaGetDevice");
    kv_described d = describe_commit(caches, layout, block_table, blocks_used);
    P_ = d.P;
    max_requests_ = d.max_requests;
    // Its own statuses (for calls without status=) hold as many requests as
    // the caches do (rows of a contiguous cache or of the block table), up
    // to own_status_max; then the descriptions.
    own_status_ = std::min<std::int64_t>(max_requests_, own_status_max);
    status_bytes_ = kv_status_bytes(static_cast<std::size_t>(own_status_));
    const std::size_t bytes = status_bytes_ + d.tensors.size() * sizeof(kv_tensor<void>);
    cuda_check(cudaMalloc(&memory_, bytes), "cudaMalloc");
    auto* base = static_cast<std::byte*>(memory_);
    const cudaError_t e = cudaMemcpy(base + status_bytes_, d.tensors.data(), d.tensors.size() * sizeof(kv_tensor<void>),
                                     cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
      (void)cudaFree(memory_);
      cuda_check(e, "cudaMemcpy");
    }
    P_.request_status = reinterpret_cast<std::int32_t*>(base);
    P_.tensors = reinterpret_cast<const kv_tensor<void>*>(base + status_bytes_);
  }
  prepared_kv_commit(const prepared_kv_commit&) = delete;
  prepared_kv_commit& operator=(const prepared_kv_commit&) = delete;
  ~prepared_kv_commit() {
    if (memory_ != nullptr) {
      int prev = -1;
      (void)cudaGetDevice(&prev);
      (void)cudaSetDevice(device_);
      (void)cudaFree(memory_);
      if (prev >= 0) (void)cudaSetDevice(prev);
    }
  }

  //! One commit on `stream`: the request statuses land in `status_out`
  //! when given (else in this object's own array, read with `check_now`).
  void operator()(const dev1<const position_id>& cache_len, const dev1<const std::int32_t>& keep_offsets,
                  const dev1<const position_id>& keep, const std::optional<dev1<std::int32_t>>& status_out,
                  std::uintptr_t stream, bool check_now) {
    device_guard g;
    g.add(cache_len, "cache_len", keep_offsets, "keep_offsets", keep, "keep", status_out, "status");
    require(g.device() == device_, status_code::invalid_argument,
            "the requests are on another CUDA device than the prepared caches");
    require(!status_out || status_out->size() == cache_len.size(), status_code::size_mismatch,
            "status needs one entry per request");
    kernels::kv_commit_params P = P_;
    set_requests(P, max_requests_, cache_len, keep_offsets, keep);
    if (status_out)
      P.request_status = status_out->data();
    else
      require(static_cast<std::int64_t>(cache_len.size()) <= own_status_, status_code::size_mismatch,
              "more than 65536 requests: pass a status= array");
    launch_commit(P, stream_of(stream), check_now);
  }

 private:
  kernels::kv_commit_params P_{};
  static constexpr std::int64_t own_status_max = 65536;
  std::int64_t max_requests_ = 0;
  std::int64_t own_status_ = 0;
  std::size_t status_bytes_ = 0;
  void* memory_ = nullptr;
  int device_ = -1;
};

template <class T>
using dev_in1 = dev1<const T>;
template <class T, int R>
using dev_in_nd = dev_nd<const T, R>;

// The keep lists on the device: no upload, allocation or wait (a graph can
// hold the launch); the statuses stay in `status` until the caller reads them.
void cuda_keep_from_results(const dev_in1<std::int32_t>& tree_offsets, const dev_in1<node_id>& parent,
                            const std::optional<dev_in1<std::int32_t>>& slot_of_node,
                            const dev_in_nd<node_id, 2>& paths, const dev_in_nd<std::int32_t, 2>& results,
                            const dev_in1<position_id>& cache_len, const dev1<position_id>& keep,
                            const dev1<std::int32_t>& keep_offsets, const dev1<std::int32_t>& status,
                            std::uintptr_t stream) {
  device_guard g;
  g.add(tree_offsets, "tree_offsets", parent, "parent", slot_of_node, "slot_of_node", paths, "paths", results,
        "results", cache_len, "cache_len", keep, "keep", keep_offsets, "keep_offsets", status, "status");
  const auto b = keep_results_args<dev_in1, dev1, dev_in_nd>(tree_offsets, parent, slot_of_node, paths, results,
                                                             cache_len, keep, keep_offsets, status);
  check(kernels::keep_indices_from_results(b, nullptr, 0, stream_of(stream)));
}

//! The status kv_commit's request statuses (read back by the caller) stand
//! for; raises the first request's failure.
void kv_commit_check(const std::vector<std::int32_t>& codes) { check(kernels::kv_commit_result(codes)); }
#endif

}  // namespace

void bind_cache(nb::module_& m) {
  using nb::arg;
  m.def("keep_indices", &keep_one, arg("parent"), arg("path"), arg("slot_of_node"), arg("cache_len"),
        arg("keep").noconvert());
  m.def("keep_indices_batch", &keep_batch, arg("parent"), arg("tree_offsets"), arg("slot_of_node"), arg("path"),
        arg("path_offsets"), arg("cache_len"), arg("keep").noconvert(), arg("keep_offsets").noconvert());
  m.def("keep_indices_from_results", &keep_from_results, arg("tree_offsets"), arg("parent"), arg("slot_of_node").none(),
        arg("paths"), arg("results"), arg("cache_len"), arg("keep").noconvert(), arg("keep_offsets").noconvert(),
        arg("status").noconvert());
  m.def("commit_kv", &commit, arg("caches").noconvert(), arg("layout"), arg("cache_len"), arg("keep_offsets"),
        arg("keep"), arg("block_table").none(), arg("blocks_used").none(), arg("status").noconvert().none(),
        arg("check"), arg("threads"));
#if defined(SPECDEC_PYTHON_HAS_CUDA)
  m.def("cuda_commit_kv_workspace_size", &kv_ws_size, arg("num_tensors"), arg("num_requests"));
  m.def("cuda_commit_kv", &cuda_commit_kv, arg("caches").noconvert(), arg("layout"), arg("cache_len"),
        arg("keep_offsets"), arg("keep"), arg("block_table").none(), arg("blocks_used").none(),
        arg("status").noconvert().none(), arg("workspace").noconvert().none(), arg("stream"), arg("check"));
  m.def("kv_commit_check", &kv_commit_check, arg("request_status"));
  m.def("cuda_keep_indices_from_results", &cuda_keep_from_results, arg("tree_offsets"), arg("parent"),
        arg("slot_of_node").none(), arg("paths"), arg("results"), arg("cache_len"), arg("keep").noconvert(),
        arg("keep_offsets").noconvert(), arg("status").noconvert(), arg("stream"));
  nb::class_<prepared_kv_commit>(m, "CudaPreparedKVCommit")
      .def(
          nb::init<const std::vector<any_dev>&, const std::string&, const std::optional<dev_nd<const std::int32_t, 2>>&,
                   const std::optional<dev1<const std::int32_t>>&>(),
          arg("caches").noconvert(), arg("layout"), arg("block_table").none(), arg("blocks_used").none())
      .def("__call__", &prepared_kv_commit::operator(), arg("cache_len"), arg("keep_offsets"), arg("keep"),
           arg("status").noconvert().none(), arg("stream"), arg("check"));
#endif
}

}  // namespace specdec::python
