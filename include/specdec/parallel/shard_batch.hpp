//! \file
//! Request batching for the vocabulary-parallel verifier: verify_trees_sharded
//! verifies R trees on a vocabulary split over ranks with one collective per
//! step for the whole batch instead of one per decision of every request.
//!
//! How. Each request's walk (verify/walk.hpp through the sharded row policy)
//! runs on its own host thread against a batched_shard_executor. A pass
//! the walk asks for is queued with the batch backend; a collective (a sum,
//! a prefix, a maximum, a broadcast, or an argument check) blocks the
//! request until every live request has blocked or finished. The last one
//! to arrive runs the step for all: the backend runs every queued pass
//! (nccl_batch_backend: one kernel, a block per request) and combines every
//! request's scalars (nccl_batch_backend: one all-gather), then wakes the
//! requests. A request takes part in consecutive steps until its walk ends,
//! so the steps are the same on every rank, and the number of collectives
//! of a call is the largest request's, not the sum over requests.
//!
//! Exactness. Each request's passes and folds are those of
//! verify_tree_sharded (rank-order folds, parallel/collective.hpp), so every
//! request gets, bit for bit, the tokens and statuses verify_tree_sharded
//! gives it alone on the same partition.
//!
//! Costs. The call starts R - 1 threads (the caller's thread walks request
//! 0) and joins them before it returns, or takes them from a
//! shard_batch_workers pool kept across calls; backends allocate their
//! host buffers once, at construction. Every rank must call with the same number
//! of requests (checked, with the partition, the backend's state and the
//! threads' start, by one argument agreement before any walk starts).
#pragma once

#include <bit>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/parallel/collective.hpp"
#include "specdec/parallel/sharded_verify.hpp"
#include "specdec/sample/detail/host_rows.hpp"
#include "specdec/verify/detail/row_ops.hpp"

namespace specdec {

//! What a request asks of one step.
enum class batch_op : std::int8_t {
  none,       //!< only run the queued passes (a full queue)
  sum,        //!< rank-order sums
  prefix,     //!< rank-order sums over the lower ranks
  max,        //!< int64 maxima
  broadcast,  //!< root's values
};

//! One request's part of a step. Inputs come from the request's pass
//! scalars (`from_host` false: the backend's per-request slots, doubles for
//! sum and prefix, int64s for max) or from host memory (an argument check
//! of the request: `din` / `lin`). Results go to `dout` / `lout`.
struct batch_post {
  batch_op op = batch_op::none;       //!< what the step does with the scalars
  bool from_host = false;             //!< inputs in din / lin, else the request's pass scalars
  int n = 0;                          //!< scalars (at most the backend's capacity)
  int root = 0;                       //!< broadcast: the rank whose values everyone gets
  const double* din = nullptr;        //!< host inputs of sum, prefix, broadcast
  const std::int64_t* lin = nullptr;  //!< host inputs of max
  double* dout = nullptr;             //!< results of sum, prefix, broadcast
  std::int64_t* lout = nullptr;       //!< results of max
};

namespace detail {

//! The rank-order combination of one post from every rank's inputs:
//! `word(q, i)` is rank q's i-th input as 8 bytes.
template <class Word>
void combine_post(const batch_post& p, int rank, int ranks, const Word& word) {
  for (int i = 0; i < p.n; ++i) {
    if (p.op == batch_op::max) {
      std::int64_t m = no_key;
      for (int q = 0; q < ranks; ++q) m = word(q, i) > m ? word(q, i) : m;
      p.lout[i] = m;
      continue;
    }
    double s = 0.0;
    if (p.op == batch_op::broadcast) {
      s = std::bit_cast<double>(word(p.root, i));
    } else {
      const int upto = p.op == batch_op::sum ? ranks : rank;
      for (int q = 0; q < upto; ++q) s += std::bit_cast<double>(word(q, i));
    }
    p.dout[i] = s;
  }
}

//! The words a step publishes, in request order: off[r] = where post r's
//! scalars start; a post from host memory is copied into `words` (doubles
//! bit for bit), and `pass_words(r, dst, n)` copies the pass scalars of the
//! others (the device backend leaves that to its kernel). Returns the
//! count.
template <class PassWords>
std::int64_t pack_posts(std::span<const batch_post* const> posts, std::int64_t* off, std::int64_t* words,
                        const PassWords& pass_words) {
  std::int64_t W = 0;
  for (std::size_t r = 0; r < posts.size(); ++r) {
    const batch_post* p = posts[r];
    if (p == nullptr || p->op == batch_op::none) continue;
    off[r] = W;
    for (int i = 0; p->from_host && i < p->n; ++i)
      words[W + i] = p->op == batch_op::max ? p->lin[i] : std::bit_cast<std::int64_t>(p->din[i]);
    if (!p->from_host) pass_words(r, words + W, p->n);
    W += p->n;
  }
  return W;
}

//! Every post's result from the gathered words of all ranks (rank q's W
//! words at gathered + q W); zeros when the step failed.
inline void unpack_posts(std::span<const batch_post* const> posts, const std::int64_t* off, std::int64_t W,
                         const std::int64_t* gathered, int rank, int ranks, bool ok) {
  for (std::size_t r = 0; r < posts.size(); ++r) {
    const batch_post* p = posts[r];
    if (p == nullptr || p->op == batch_op::none) continue;
    if (!ok) {
      for (int i = 0; i < p->n; ++i) {
        if (p->op == batch_op::max)
          p->lout[i] = 0;
        else
          p->dout[i] = 0.0;
      }
      continue;
    }
    const std::int64_t o = off[r];
    combine_post(*p, rank, ranks, [&](int q, int i) { return gathered[q * W + o + i]; });
  }
}

}  // namespace detail

//! The batch backend over any host collective: passes run at once on host
//! rows (on the request's thread). A step makes one all-gather of every
//! request's scalars when the collective has one (gathering_collective; the
//! layout nccl_batch_backend uses), else one collective per kind (sum,
//! prefix, max, and a broadcast per root) carrying every request's scalars
//! of that kind, in calls of at most the collective's max_scalars (64 when
//! it states none; nccl_collective has no all-gather and carries 64).
//! Host buffers are allocated here, once.
template <collective C>
class host_batch_backend {
 public:
  //! Most scalars of each type one request's pass writes per step.
  static constexpr int capacity = 64;
  //! Borrows `coll`; room for `max_requests` requests per call.
  host_batch_backend(C& coll, std::int32_t max_requests)
      : c_(&coll),
        max_(max_requests > 0 ? max_requests : 0),
        d_(static_cast<std::size_t>(max_) * capacity),
        l_(static_cast<std::size_t>(max_) * capacity),
        buf_(static_cast<std::size_t>(max_) * capacity),
        lbuf_(static_cast<std::size_t>(max_) * capacity * (gathering_collective<C> ? 1 + coll.size() : 1)),
        off_(static_cast<std::size_t>(max_)) {}
  //! This rank.
  [[nodiscard]] int rank() const { return c_->rank(); }
  //! Number of ranks.
  [[nodiscard]] int size() const { return c_->size(); }
  //! Most requests of one call.
  [[nodiscard]] std::int32_t max_requests() const noexcept { return max_; }
  //! The collective on host memory (the batch's own argument agreement).
  C& coll() noexcept { return *c_; }
  //! The collective's sticky failure, or success.
  [[nodiscard]] status error() const { return collective_error(*c_); }
  //! The partition as passes read it (host memory: the caller's array).
  const std::int64_t* stage_bounds(std::span<const std::int64_t> bounds, std::int64_t*) noexcept {
    return bounds.data();
  }
  //! Runs request r's pass now (host rows, through the record the device
  //! backend queues); never full.
  template <class Pass>
  bool queue(std::int32_t r, const Pass& f) {
    detail::any_shard_pass(f).run(detail::host_row_ops{}, slot_d(r), slot_l(r));
    return true;
  }
  //! The step: posts[r] is request r's post, or null when r takes no part.
  void step(std::span<const batch_post* const> posts) {
    if constexpr (gathering_collective<C>) {
      const std::size_t all = static_cast<std::size_t>(max_) * capacity;
      const std::int64_t W =
          detail::pack_posts(posts, off_.data(), lbuf_.data(), [&](std::size_t r, std::int64_t* w, int n) {
            for (int i = 0; i < n; ++i)
              w[i] = posts[r]->op == batch_op::max ? slot_l(r)[i] : std::bit_cast<std::int64_t>(slot_d(r)[i]);
          });
      if (W > 0) c_->all_gather(lbuf_.data(), static_cast<int>(W), lbuf_.data() + all);
      detail::unpack_posts(posts, off_.data(), W, lbuf_.data() + all, rank(), size(), error().ok());
      return;
    }
    for (const batch_op op : {batch_op::sum, batch_op::prefix}) fold_kind(posts, op, -1);
    int n = 0;
    for (std::size_t r = 0; r < posts.size(); ++r)
      if (posts[r] != nullptr && posts[r]->op == batch_op::max)
        for (int i = 0; i < posts[r]->n; ++i) lbuf_[static_cast<std::size_t>(n++)] = in_l(*posts[r], r)[i];
    for (int at = 0; at < n; at += chunk) c_->all_reduce_max(lbuf_.data() + at, n - at < chunk ? n - at : chunk);
    n = 0;
    for (std::size_t r = 0; r < posts.size(); ++r)
      if (posts[r] != nullptr && posts[r]->op == batch_op::max)
        for (int i = 0; i < posts[r]->n; ++i) posts[r]->lout[i] = lbuf_[static_cast<std::size_t>(n++)];
    for (int root = 0; root < size(); ++root) fold_kind(posts, batch_op::broadcast, root);
  }

 private:
  double* slot_d(std::size_t r) noexcept { return d_.data() + r * capacity; }
  std::int64_t* slot_l(std::size_t r) noexcept { return l_.data() + r * capacity; }
  const double* in_d(const batch_post& p, std::size_t r) noexcept { return p.from_host ? p.din : slot_d(r); }
  const std::int64_t* in_l(const batch_post& p, std::size_t r) noexcept { return p.from_host ? p.lin : slot_l(r); }
  // One collective of kind `op` (broadcasts: those of `root`) over every
  // request's doubles of that kind, in request order.
  void fold_kind(std::span<const batch_post* const> posts, batch_op op, int root) {
    int n = 0;
    auto takes = [&](const batch_post* p) { return p != nullptr && p->op == op && (root < 0 || p->root == root); };
    for (std::size_t r = 0; r < posts.size(); ++r)
      if (takes(posts[r]))
        for (int i = 0; i < posts[r]->n; ++i) buf_[static_cast<std::size_t>(n++)] = in_d(*posts[r], r)[i];
    for (int at = 0; at < n; at += chunk) {  // per element: chunks fold exactly as one call
      const int m = n - at < chunk ? n - at : chunk;
      if (op == batch_op::sum) c_->all_reduce_sum(buf_.data() + at, m);
      if (op == batch_op::prefix) c_->exclusive_prefix_sum(buf_.data() + at, m);
      if (op == batch_op::broadcast) c_->broadcast(buf_.data() + at, m, root);
    }
    n = 0;
    for (std::size_t r = 0; r < posts.size(); ++r)
      if (takes(posts[r]))
        for (int i = 0; i < posts[r]->n; ++i) posts[r]->dout[i] = buf_[static_cast<std::size_t>(n++)];
  }

  // Scalars per collective call: the collective's max_scalars
  // (nccl_collective: 64), else 64.
  static constexpr int chunk = [] {
    if constexpr (requires { C::max_scalars; }) return static_cast<int>(C::max_scalars);
    return 64;
  }();
  static_assert(chunk > 0, "a collective must carry at least one scalar per call");
  C* c_;
  std::int32_t max_;
  std::vector<double> d_;
  std::vector<std::int64_t> l_;
  std::vector<double> buf_;
  std::vector<std::int64_t> lbuf_;  // gathering: this rank's words, then every rank's
  std::vector<std::int64_t> off_;
};

//! The lockstep of one call: every live request posts, the last to arrive
//! runs the step. Internal to verify_trees_sharded.
template <class Backend>
class shard_batch {
 public:
  //! A lockstep of `requests` requests over backend `b` (not owned).
  shard_batch(Backend& b, std::int32_t requests)
      : b_(&b), live_(requests), posts_(static_cast<std::size_t>(requests), nullptr) {}
  //! The backend.
  Backend& backend() noexcept { return *b_; }
  //! Request r's pass (a full queue runs a step first).
  template <class Pass>
  void run(std::int32_t r, const Pass& f) {
    while (!b_->queue(r, f)) post(r, batch_post{});
  }
  //! Blocks until the step holding request r's post has run.
  void post(std::int32_t r, const batch_post& p) {
    static const batch_post nothing{};
    std::unique_lock<std::mutex> lk(m_);
    const bool fits = p.n >= 0 && p.n <= Backend::capacity;
    if (!fits && err_.ok())
      err_ = make_status(status_code::internal_error, "a collective of more scalars than a step slot");
    posts_[static_cast<std::size_t>(r)] = fits ? &p : &nothing;
    ++posted_;
    if (posted_ == live_) {
      step();
      return;
    }
    const std::uint64_t gen = gen_;
    cv_.wait(lk, [&] { return gen_ != gen; });
  }
  //! The first failure of the batch or its backend, or success.
  [[nodiscard]] status error() {
    std::lock_guard<std::mutex> lk(m_);
    return err_.ok() ? b_->error() : err_;
  }
  //! Request r's walk has ended: it takes part in no further step, and
  //! passes it queued after its last collective are dropped (a backend
  //! that queues has drop(r)).
  void leave(std::int32_t r) {
    std::lock_guard<std::mutex> lk(m_);
    if constexpr (requires { b_->drop(r); }) b_->drop(r);
    --live_;
    if (live_ > 0 && posted_ == live_) step();
  }
  //! Stages the partition (serialised with the steps).
  const std::int64_t* stage_bounds(std::span<const std::int64_t> bounds, std::int64_t* dst) {
    std::lock_guard<std::mutex> lk(m_);
    return b_->stage_bounds(bounds, dst);
  }

 private:
  void step() {  // under m_
    b_->step(posts_);
    for (auto& p : posts_) p = nullptr;
    posted_ = 0;
    ++gen_;
    cv_.notify_all();
  }
  Backend* b_;
  std::mutex m_;
  std::condition_variable cv_;
  std::int32_t live_;
  std::int32_t posted_ = 0;
  std::uint64_t gen_ = 0;
  std::vector<const batch_post*> posts_;
  status err_ = status::success();
};

//! The collective of one request of a batch (its argument agreement):
//! each call is the request's post in one step.
template <class Backend>
class batched_collective {
 public:
  //! Request r's collective in lockstep b.
  batched_collective(shard_batch<Backend>& b, std::int32_t r) noexcept : b_(&b), r_(r) {}
  //! This rank.
  [[nodiscard]] int rank() const { return b_->backend().rank(); }
  //! Number of ranks.
  [[nodiscard]] int size() const { return b_->backend().size(); }
  //! v[i] = the rank-order sum of v[i] (one step).
  void all_reduce_sum(double* v, int n) { host(batch_op::sum, v, n); }
  //! v[i] = the rank-order sum over the lower ranks (one step).
  void exclusive_prefix_sum(double* v, int n) { host(batch_op::prefix, v, n); }
  //! v[0..n) = root's v[0..n) (one step).
  void broadcast(double* v, int n, int root) { host(batch_op::broadcast, v, n, root); }
  //! v[i] = the maximum over ranks (one step).
  void all_reduce_max(std::int64_t* v, int n) {
    batch_post p{batch_op::max, true, n, 0, nullptr, v, nullptr, v};
    b_->post(r_, p);
  }
  //! The batch's or its backend's failure, or success.
  [[nodiscard]] status error() const { return b_->error(); }

 private:
  void host(batch_op op, double* v, int n, int root = 0) {
    batch_post p{op, true, n, root, v, nullptr, v, nullptr};
    b_->post(r_, p);
  }
  shard_batch<Backend>* b_;
  std::int32_t r_;
};

//! The shard executor of one request of a batch (the interface of
//! host_shard_executor): passes go to the batch backend's queue, scalars
//! to the request's post in the next step.
template <class Backend>
class batched_shard_executor {
 public:
  //! Most scalars of each type one pass writes.
  static constexpr int capacity = Backend::capacity;
  //! Request r's executor in lockstep b.
  batched_shard_executor(shard_batch<Backend>& b, std::int32_t r) noexcept : b_(&b), r_(r), coll_(b, r) {}
  //! This rank.
  [[nodiscard]] int rank() const { return coll_.rank(); }
  //! Number of ranks.
  [[nodiscard]] int size() const { return coll_.size(); }
  //! The request's collective (its argument agreement).
  batched_collective<Backend>& coll() noexcept { return coll_; }
  //! The batch's or its backend's failure, or success.
  [[nodiscard]] status error() const { return b_->error(); }
  //! The partition where the backend's passes read it.
  const std::int64_t* stage_bounds(std::span<const std::int64_t> bounds, std::int64_t* dst) {
    return b_->stage_bounds(bounds, dst);
  }
  //! Queues a pass of parallel/detail/shard_passes.hpp.
  template <class Pass>
  void run(const Pass& f) {
    b_->run(r_, f);
  }
  //! out[0..n) = the rank-order sums of the last pass's first n doubles (one step).
  void sum(int n, double* out) { pass(batch_op::sum, n, out, nullptr); }
  //! out[0..n) = the rank-order sums over the lower ranks (one step).
  void prefix(int n, double* out) { pass(batch_op::prefix, n, out, nullptr); }
  //! out[0..n) = the maxima of the last pass's first n int64s (one step).
  void max(int n, std::int64_t* out) { pass(batch_op::max, n, nullptr, out); }

 private:
  void pass(batch_op op, int n, double* d, std::int64_t* l) {
    batch_post p{op, false, n, 0, nullptr, nullptr, d, l};
    b_->post(r_, p);
  }
  shard_batch<Backend>* b_;
  std::int32_t r_;
  batched_collective<Backend> coll_;
};

//! One request of verify_trees_sharded: the arguments of verify_tree_sharded
//! for one tree. p, q and the workspace's executor part in the memory the
//! backend's passes read (host memory for host_batch_backend, device
//! memory for nccl_batch_backend).
struct sharded_tree_request {
  tree_view tree;                                     //!< the request's tree
  view2d<const float> p;                              //!< this rank's N x width shard of the target rows
  view2d<const float> q;                              //!< the draft rows' shard (sampled modes)
  verify_params params;                               //!< mode, seed, request id, round
  shard_workspace workspace{std::span<std::byte>{}};  //!< sharded_verify_workspace_size / _parts bytes
  std::span<node_id> path;                            //!< max depth + 1 entries
  std::span<token_id> tokens;                         //!< max depth + 1 entries
  const caller_uniforms* uniforms = nullptr;          //!< the caller's uniforms, or null for keyed Philox
};

namespace detail {

//! Runs f; false when it threw. Without exceptions (-fno-exceptions) an
//! allocation failure aborts instead, and this is always true.
template <class F>
bool ran_without_throwing(const F& f) {
#if SPECDEC_HAS_EXCEPTIONS
  try {
    f();
  } catch (...) {
    return false;
  }
#else
  f();
#endif
  return true;
}

//! What every rank of a batch call must agree on: the request count and
//! the partition.
inline std::uint64_t batch_fingerprint(std::size_t requests, std::span<const std::int64_t> bounds) noexcept {
  std::uint64_t fp = 0xcbf29ce484222325ull;
  fingerprint_add(fp, static_cast<std::int64_t>(requests));
  for (const std::int64_t b : bounds) fingerprint_add(fp, b);
  return fp;
}

//! The request threads of one call: started before the ranks agree, each
//! waiting at the gate; open(true) lets them walk, open(false) (also the
//! destructor's, should anything throw) sends them home; joined on
//! destruction.
class request_threads {
 public:
  request_threads() = default;
  request_threads(const request_threads&) = delete;
  request_threads& operator=(const request_threads&) = delete;
  ~request_threads() {
    open(false);
    for (auto& t : threads_) t.join();
  }
  //! Starts f(r) for r in [1, R) behind the gate (throws what std::thread throws).
  template <class F>
  void start(std::int32_t R, const F& f) {
    threads_.reserve(static_cast<std::size_t>(R > 1 ? R - 1 : 0));
    for (std::int32_t r = 1; r < R; ++r)
      threads_.emplace_back([this, &f, r] {
        {
          std::unique_lock<std::mutex> lk(m_);
          cv_.wait(lk, [&] { return gate_ != 0; });
          if (gate_ < 0) return;
        }
        f(r);
      });
  }
  void open(bool walk) {
    {
      std::lock_guard<std::mutex> lk(m_);
      if (gate_ == 0) gate_ = walk ? 1 : -1;
    }
    cv_.notify_all();
  }
  void join() {
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  //! The runner interface of verify_trees_batched: start (may throw),
  //! then after the agreement walk (f(0) on this thread) or send home.
  template <class F>
  bool prepare(std::int32_t R, const F& f) {
    start(R, f);
    return true;
  }
  //! Opens the gate (walking when `walk`), walks request 0, joins. A
  //! throw ends the program (the threads would still be running f).
  template <class F>
  void run(bool walk, std::int32_t R, const F& f) noexcept {
    open(walk);
    if (walk && R > 0) f(0);
    join();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int gate_ = 0;  // 0: wait, 1: walk, -1: return
  std::vector<std::thread> threads_;
};

}  // namespace detail

//! Host threads kept across verify_trees_sharded calls, so that a call
//! starts none: request r > 0 of a call walks on worker r - 1, request 0 on
//! the calling thread. For engines that verify a batch every decode step
//! (a thread started and joined per request and call costs tens of
//! microseconds). One call at a time: a call on a pool that serves
//! another fails on every rank.
class shard_batch_workers {
 public:
  //! Starts max_requests - 1 workers. A pool whose threads could not all
  //! start keeps none and takes no request (max_requests() == 0), so a
  //! call on it fails on every rank.
  explicit shard_batch_workers(std::int32_t max_requests) : max_(max_requests > 1 ? max_requests : 1) {
    if (!detail::ran_without_throwing([&] {
          threads_.reserve(static_cast<std::size_t>(max_ - 1));
          for (std::int32_t r = 1; r < max_; ++r) threads_.emplace_back([this, r] { serve(r); });
        })) {
      stop();
      max_ = 0;
    }
  }
  shard_batch_workers(const shard_batch_workers&) = delete;
  shard_batch_workers& operator=(const shard_batch_workers&) = delete;
  //! Stops and joins the workers.
  ~shard_batch_workers() { stop(); }
  //! Largest batch a call on this pool takes.
  std::int32_t max_requests() const noexcept { return max_; }

  //! The runner interface of verify_trees_batched: claims the pool for
  //! one call; false when it is too small for R requests or serves
  //! another call.
  template <class F>
  bool prepare(std::int32_t R, const F&) noexcept {
    const std::lock_guard<std::mutex> lk(m_);
    if (R > max_ || busy_) return false;
    busy_ = true;
    return true;
  }
  //! After a prepare that returned true: when `walk`, f(r) for r in
  //! [1, R) on the workers and f(0) here, returning once every f has
  //! returned; then releases the pool. A throw ends the program (the
  //! workers would still be running f).
  template <class F>
  void run(bool walk, std::int32_t R, const F& f) noexcept {
    if (walk && R == 1) f(0);
    if (walk && R > 1) {
      {
        const std::lock_guard<std::mutex> lk(m_);
        job_ = [](const void* g, std::int32_t r) { (*static_cast<const F*>(g))(r); };
        arg_ = &f;
        count_ = R;
        pending_ = R - 1;
        ++generation_;
      }
      go_.notify_all();
      f(0);
      std::unique_lock<std::mutex> lk(m_);
      done_.wait(lk, [&] { return pending_ == 0; });
    }
    const std::lock_guard<std::mutex> lk(m_);
    busy_ = false;
  }

 private:
  // Worker r takes part in every call of more than r requests; one that
  // sleeps through a call it has no part in wakes to the next one.
  void serve(std::int32_t r) {
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> lk(m_);
    for (;;) {
      go_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (r >= count_) continue;
      void (*const job)(const void*, std::int32_t) = job_;
      const void* const arg = arg_;
      lk.unlock();
      job(arg, r);
      lk.lock();
      if (--pending_ == 0) done_.notify_all();
    }
  }
  void stop() {
    {
      const std::lock_guard<std::mutex> lk(m_);
      stop_ = true;
    }
    go_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

  std::int32_t max_;
  std::mutex m_;
  std::condition_variable go_, done_;
  std::uint64_t generation_ = 0;
  std::int32_t count_ = 0, pending_ = 0;
  bool stop_ = false, busy_ = false;
  void (*job_)(const void*, std::int32_t) = nullptr;
  const void* arg_ = nullptr;
  std::vector<std::thread> threads_;
};

namespace detail {

//! verify_trees_sharded's body; Runner (request_threads or
//! shard_batch_workers) provides the request threads: prepare(R, walk)
//! before the agreement (false or a throw fails the call on every rank),
//! then, when it returned true, run(agreed, R, walk).
template <class Backend, class Runner>
status verify_trees_batched(Backend& backend, Runner& runner, std::span<const std::int64_t> bounds,
                            std::span<const sharded_tree_request> requests, std::span<verify_result> results,
                            std::span<status> statuses) {
  auto R = static_cast<std::int32_t>(requests.size() < static_cast<std::size_t>(INT32_MAX) ? requests.size() : 0);
  status local = backend.error();
  if (local.ok() && (requests.size() >= static_cast<std::size_t>(INT32_MAX) || R > backend.max_requests()))
    local = make_status(status_code::buffer_too_small, "more requests than the batch backend has room for");
  else if (local.ok() && (results.size() < requests.size() || statuses.size() < requests.size()))
    local = make_status(status_code::buffer_too_small, "results and statuses need one entry per request");
  if (!local.ok()) R = 0;  // no thread either
  std::optional<::specdec::shard_batch<Backend>> batch;
  auto walk = [&](std::int32_t r) {
    const sharded_tree_request& q = requests[static_cast<std::size_t>(r)];
    batched_shard_executor<Backend> ex(*batch, r);
    verify_result res{};
    const status s = with_shard_call(ex, bounds, q.tree.size, q.workspace, q.params, q.uniforms,
                                     [&](auto& e, const auto& uni, std::span<std::byte> ew, std::span<std::byte> hw) {
                                       return verify_tree_sharded_with(e, bounds, q.tree, q.p, q.q, q.params, uni,
                                                                       q.uniforms, ew, hw, q.path, q.tokens, res);
                                     });
    results[static_cast<std::size_t>(r)] = s.ok() ? res : verify_result{0, 0, -1, s.code()};  // code: per request
    statuses[static_cast<std::size_t>(r)] = s;
    batch->leave(r);
  };
  // Every request's thread is started (or found in the pool) before the
  // ranks agree, and waits: a rank that cannot allocate or start one fails
  // the call on every rank before any step (the walks would otherwise make
  // different steps on different ranks).
  bool prepared = false;
  if (!ran_without_throwing([&] {
        batch.emplace(backend, R > 0 ? R : 1);
        prepared = runner.prepare(R, walk);
      })) {
    local = make_status(status_code::internal_error, "could not allocate the batch or start a thread per request");
    R = 0;
  } else if (!prepared) {
    local = make_status(status_code::buffer_too_small,
                        "more requests than the shard_batch_workers take, or the pool serves another call");
    R = 0;
  }
  status agreed = agree_status(backend.coll(), local, batch_fingerprint(requests.size(), bounds));
  if (agreed.ok()) agreed = collective_error(backend.coll());
  // Threads started before a failure are sent home by ~request_threads.
  if (prepared) runner.run(agreed.ok(), R, walk);
  return agreed.ok() ? batch->error() : agreed;
}

}  // namespace detail

//! Verifies R trees on a vocabulary split over ranks, batching every
//! request's collectives into one per step (see the file comment).
//! Collective: every rank calls it with the same partition and requests
//! (each request's tree, parameters and uniforms as verify_tree_sharded
//! requires). `backend`: host_batch_backend (passes on host rows, any
//! collective) or nccl_batch_backend (parallel/cuda_shard.cuh), with room
//! for requests.size() requests. results[r] and status[r] receive request
//! r's result and status exactly as verify_tree_sharded would return them
//! (a bad request gets its status, the others verify). Returns a failure
//! (and writes no result) when the batch itself is bad on any rank: R over
//! the backend's room, results or status shorter than R, a failed backend,
//! a thread that could not start, or ranks passing different partitions or
//! request counts. Starts R - 1 threads and joins them before it returns.
template <class Backend>
status verify_trees_sharded(Backend& backend, std::span<const std::int64_t> bounds,
                            std::span<const sharded_tree_request> requests, std::span<verify_result> results,
                            std::span<status> statuses) {
  detail::request_threads threads;
  return detail::verify_trees_batched(backend, threads, bounds, requests, results, statuses);
}

//! verify_trees_sharded with the request threads of `workers`, started
//! once for many calls. More requests than workers.max_requests(), or a
//! pool that serves another call, fail the call on every rank
//! (buffer_too_small).
template <class Backend>
status verify_trees_sharded(Backend& backend, shard_batch_workers& workers, std::span<const std::int64_t> bounds,
                            std::span<const sharded_tree_request> requests, std::span<verify_result> results,
                            std::span<status> statuses) {
  return detail::verify_trees_batched(backend, workers, bounds, requests, results, statuses);
}

//! verify_trees_sharded on host rows over a collective (a
//! host_batch_backend made for the call; a rank that cannot allocate it
//! fails the call on every rank).
template <collective C>
status verify_trees_sharded(C& coll, std::span<const std::int64_t> bounds,
                            std::span<const sharded_tree_request> requests, std::span<verify_result> results,
                            std::span<status> statuses) {
  std::optional<host_batch_backend<C>> backend;
  if (!detail::ran_without_throwing([&] {
        backend.emplace(coll, static_cast<std::int32_t>(
                                  requests.size() < static_cast<std::size_t>(INT32_MAX) ? requests.size() : 0));
      })) {
    const status failed = make_status(status_code::internal_error, "could not allocate the batch backend");
    return agree_status(coll, failed, detail::batch_fingerprint(requests.size(), bounds));
  }
  return verify_trees_sharded(*backend, bounds, requests, results, statuses);
}

}  // namespace specdec
