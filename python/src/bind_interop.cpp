// Peer formats (include/specdec/interop; SGLang's batch entry points are in
// bind_interop_sglang.cpp): SGLang / EAGLE linked-list trees both ways,
// greedy verification from target argmax ids, Medusa / EAGLE-1 choice
// buffers, Medusa's typical selection, SGLang's outputs from a specdec path,
// candidate gathering, per-depth counts and FlashInfer's chain coins. Host
// arrays only.
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "common.hpp"
#include "specdec/interop/choice_buffers.hpp"
#include "specdec/interop/greedy_ids.hpp"
#include "specdec/interop/linked_tree.hpp"
#include "specdec/interop/results.hpp"
#include "specdec/interop/typical.hpp"

namespace specdec::python {
namespace {

// ---- linked lists ----------------------------------------------------------

template <class I>
std::int32_t from_linked(const in1<I>& candidates, const in1<I>& next_token, const in1<I>& next_sibling,
                         bool unused_root, token_id root_token, bool require_all, const out1<node_id>& parent,
                         const out1<token_id>& tokens, const out1<std::int32_t>& old_to_new,
                         const out1<std::int32_t>& new_to_old) {
  require(candidates.size() == next_token.size() && candidates.size() == next_sibling.size(),
          status_code::size_mismatch, "candidates, next_token and next_sibling need one entry per slot");
  require(candidates.size() <= static_cast<std::size_t>(INT32_MAX), status_code::invalid_argument, "too many slots");
  const linked_tree<I> t{candidates.data(), next_token.data(), next_sibling.data(),
                         static_cast<std::int32_t>(candidates.size())};
  linked_tree_options o;
  o.unused_root = unused_root;
  o.root_token = root_token;
  o.require_all = require_all;
  // Outputs are written only on success: the conversion writes as it goes.
  const std::size_t n = candidates.size();
  std::vector<node_id> p(n);
  std::vector<token_id> tk(n);
  std::vector<std::int32_t> o2n(n), n2o(n);
  std::int32_t count = 0;
  require(parent.size() >= n && tokens.size() >= n && old_to_new.size() >= n && new_to_old.size() >= n,
          status_code::size_mismatch, "outputs need one entry per slot");
  check(tree_from_linked_list<I>(t, o, p, tk, o2n, n2o, count));
  std::copy(p.begin(), p.end(), parent.data());
  std::copy(tk.begin(), tk.end(), tokens.data());
  std::copy(o2n.begin(), o2n.end(), old_to_new.data());
  std::copy(n2o.begin(), n2o.end(), new_to_old.data());
  return count;
}

void to_linked(const in1<node_id>& parent, const in1<token_id>& tokens, const out1<std::int64_t>& next_token,
               const out1<std::int64_t>& next_sibling) {
  require(parent.size() == tokens.size(), status_code::size_mismatch, "parent and tokens differ in size");
  const tree_view t{tokens.data(), parent.data(), nullptr, nullptr, static_cast<std::int32_t>(parent.size())};
  check(validate_tree(t));
  check(linked_list_from_tree<std::int64_t>(t, span_of(next_token), span_of(next_sibling)));
}

// ---- greedy ids, choice buffers, typical --------------------------------------

std::tuple<std::int32_t, std::int32_t, std::int32_t> greedy_ids(const in1<node_id>& parent, const in1<token_id>& tokens,
                                                                const in1<token_id>& target_ids, std::int64_t vocab,
                                                                bool unused_root, std::int32_t max_accept,
                                                                const out1<node_id>& path,
                                                                const out1<token_id>& tokens_out) {
  require(parent.size() == tokens.size(), status_code::size_mismatch, "parent and tokens differ in size");
  const tree_view t{tokens.data(), parent.data(), nullptr, nullptr, static_cast<std::int32_t>(parent.size())};
  greedy_ids_options o;
  o.unused_root = unused_root;
  o.max_accept = max_accept;
  verify_result r{};
  check(verify_greedy_ids(t, span_of(target_ids), vocab, o, span_of(path), span_of(tokens_out), r));
  return {r.accepted, r.last_node, r.next_token};
}

void node_ranks(const in1<std::int32_t>& ranks, const in1<std::int32_t>& offsets, const in1<std::int32_t>& node_choice,
                const out1<std::int32_t>& node_rank) {
  check(choice_node_ranks(span_of(ranks), span_of(offsets), span_of(node_choice), span_of(node_rank)));
}

choice_layout layout_of(const std::string& s) {
  if (s == "medusa") return choice_layout::medusa;
  if (s == "eagle1") return choice_layout::eagle1;
  check(make_status(status_code::invalid_argument, "layout must be \"medusa\" or \"eagle1\""));
  return choice_layout::medusa;
}

void tree_indices(const in1<node_id>& parent, const in1<std::int32_t>& node_rank, std::int32_t topk,
                  const std::string& layout, const out1<std::int32_t>& out) {
  check(choice_tree_indices(span_of(parent), span_of(node_rank), topk, layout_of(layout), span_of(out)));
}

std::tuple<std::int32_t, std::int32_t> retrieve_dims(const in1<node_id>& parent) {
  std::int32_t leaves = 0, width = 0;
  check(retrieve_shape(span_of(parent), leaves, width));
  return {leaves, width};
}

void retrieve(const in1<node_id>& parent, const std::string& layout, const out_nd<std::int32_t, 2>& out) {
  check(retrieve_indices(span_of(parent), layout_of(layout), view_of<2>(out)));
}

std::tuple<std::int32_t, std::int32_t> typical_select(const in_nd<std::int32_t, 2>& retrieve_rows,
                                                      const in1<token_id>& tokens, const in_nd<float, 2>& p,
                                                      float epsilon, float delta, bool first_row) {
  typical_params tp;
  tp.epsilon = epsilon;
  tp.delta = delta;
  tp.tie_break = first_row ? typical_tie_break::first_row : typical_tie_break::highest_likelihood;
  std::vector<float> sc(p.shape(0));
  std::int32_t best = 0, length = 0;
  check(medusa_typical_select(view_of<2>(retrieve_rows), span_of(tokens), view_of<2>(p), tp, sc, best, length));
  return {best, length};
}

// ---- results in the caller's index space --------------------------------------

// One request's SGLang outputs (int32, as SGLang) from a specdec path; slot_row
// in int64 (SGLang's retrive_index row) or int32. Returns accept_token_num.
template <class I>
std::int32_t sglang_results(const in1<node_id>& path, const in1<token_id>& tokens, std::int32_t accepted,
                            const in1<std::int32_t>& node_slot, const in1<I>& slot_row,
                            const out1<std::int32_t>& accept_index, const out1<std::int32_t>& predicts) {
  std::int32_t num = 0;
  check(write_sglang_results<I, std::int32_t>(span_of(path), span_of(tokens), accepted, span_of(node_slot),
                                              span_of(slot_row), span_of(accept_index), num, span_of(predicts)));
  return num;
}

void gather_tokens(const in1<std::int32_t>& tree_indices, const in1<token_id>& flat, const out1<token_id>& token) {
  check(gather_candidate_tokens(span_of(tree_indices), span_of(flat), span_of(token)));
}

// Every request's accepted count, added one after the other.
void count_per_depth(const in1<std::int32_t>& accepted, const out1<std::int64_t>& per_depth) {
  for (const std::int32_t a : span_of(accepted)) count_acceptance_per_depth(a, span_of(per_depth));
}

void coins_of(std::uint64_t seed, std::uint32_t request, std::uint32_t round, const out1<float>& coins) {
  chain_coins(key_params(seed, request, round), span_of(coins));
}

}  // namespace

void bind_interop(nb::module_& m) {
  using nb::arg;
  m.def("tree_from_linked_list_i64", &from_linked<std::int64_t>, arg("candidates"), arg("next_token"),
        arg("next_sibling"), arg("unused_root"), arg("root_token"), arg("require_all"), arg("parent").noconvert(),
        arg("tokens").noconvert(), arg("old_to_new").noconvert(), arg("new_to_old").noconvert());
  m.def("tree_from_linked_list_i32", &from_linked<std::int32_t>, arg("candidates"), arg("next_token"),
        arg("next_sibling"), arg("unused_root"), arg("root_token"), arg("require_all"), arg("parent").noconvert(),
        arg("tokens").noconvert(), arg("old_to_new").noconvert(), arg("new_to_old").noconvert());
  m.def("linked_list_from_tree", &to_linked, arg("parent"), arg("tokens"), arg("next_token").noconvert(),
        arg("next_sibling").noconvert());
  m.def("verify_greedy_ids", &greedy_ids, arg("parent"), arg("tokens"), arg("target_ids"), arg("vocab"),
        arg("unused_root"), arg("max_accept"), arg("path").noconvert(), arg("tokens_out").noconvert());
  m.def("choice_node_ranks", &node_ranks, arg("ranks"), arg("offsets"), arg("node_choice"),
        arg("node_rank").noconvert());
  m.def("choice_tree_indices", &tree_indices, arg("parent"), arg("node_rank"), arg("topk"), arg("layout"),
        arg("out").noconvert());
  m.def("retrieve_shape", &retrieve_dims, arg("parent"));
  m.def("retrieve_indices", &retrieve, arg("parent"), arg("layout"), arg("out").noconvert());
  m.def("medusa_typical_select", &typical_select, arg("retrieve"), arg("tokens"), arg("p"), arg("epsilon"),
        arg("delta"), arg("first_row"));
  m.def("write_sglang_results_i64", &sglang_results<std::int64_t>, arg("path"), arg("tokens"), arg("accepted"),
        arg("node_slot"), arg("slot_row"), arg("accept_index").noconvert(), arg("predicts").noconvert());
  m.def("write_sglang_results_i32", &sglang_results<std::int32_t>, arg("path"), arg("tokens"), arg("accepted"),
        arg("node_slot"), arg("slot_row"), arg("accept_index").noconvert(), arg("predicts").noconvert());
  m.def("gather_candidate_tokens", &gather_tokens, arg("tree_indices"), arg("flat"), arg("token").noconvert());
  m.def("count_acceptance_per_depth", &count_per_depth, arg("accepted"), arg("per_depth").noconvert());
  m.def("chain_coins", &coins_of, arg("seed"), arg("request"), arg("round"), arg("coins").noconvert());
}

}  // namespace specdec::python
