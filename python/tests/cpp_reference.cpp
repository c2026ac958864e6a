// The C++ side of the Python cross-checks: reads whitespace-separated jobs
// from stdin, runs the same specdec entry points the binding wraps, prints
// one line per output array.
//   verify N V mode seed request round  parent[N] tokens[N] p[N*V] q[N*V]
//     -> "accepted last next" then "tokens[0..accepted]"
//   mask N parent[N]  -> packed uint64 mask words, then positions (cache_len 7)
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "specdec/tree/mask.hpp"
#include "specdec/tree/positions.hpp"
#include "specdec/verify/tree_verify.hpp"

template <class T>
std::vector<T> read(std::size_t n) {
  std::vector<T> v(n);
  for (auto& x : v) std::cin >> x;
  return v;
}

int main() {
  std::string job;
  while (std::cin >> job) {
    if (job == "verify") {
      std::int32_t n = 0, mode = 0, request = 0, round = 0;
      std::int64_t V = 0;
      std::uint64_t seed = 0;
      std::cin >> n >> V >> mode >> seed >> request >> round;
      const auto parent = read<std::int32_t>(static_cast<std::size_t>(n));
      const auto tokens = read<std::int32_t>(static_cast<std::size_t>(n));
      const auto p = read<float>(static_cast<std::size_t>(n * V));
      const auto q = read<float>(static_cast<std::size_t>(n * V));
      specdec::verify_params vp;
      vp.mode = static_cast<specdec::verify_mode>(mode);
      vp.seed = seed;
      vp.request = static_cast<std::uint32_t>(request);
      vp.round = static_cast<std::uint32_t>(round);
      std::vector<std::uint64_t> ws((specdec::verify_workspace_size(V, n) + 7) / 8);
      std::vector<std::int32_t> path(static_cast<std::size_t>(n)), out(static_cast<std::size_t>(n));
      specdec::verify_result r{};
      const specdec::tree_view t{tokens.data(), parent.data(), nullptr, nullptr, n};
      const auto s = specdec::verify_tree(t, specdec::make_view(p.data(), n, V), specdec::make_view(q.data(), n, V), vp,
                                          std::as_writable_bytes(std::span(ws)), path, out, r);
      if (!s.ok()) {
        std::cout << "error " << static_cast<int>(s.code()) << "\n\n";
        continue;
      }
      std::cout << r.accepted << ' ' << r.last_node << ' ' << r.next_token << '\n';
      for (std::int32_t k = 0; k <= r.accepted; ++k) std::cout << out[static_cast<std::size_t>(k)] << ' ';
      std::cout << '\n';
    } else if (job == "mask") {
      std::int32_t n = 0;
      std::cin >> n;
      const auto parent = read<std::int32_t>(static_cast<std::size_t>(n));
      const auto m = specdec::packed_mask<std::uint64_t>(parent);
      for (auto w : m) std::cout << w << ' ';
      std::cout << '\n';
      for (auto v : specdec::positions<std::int64_t>(parent, 7)) std::cout << v << ' ';
      std::cout << '\n';
    } else {
      std::cerr << "unknown job " << job << '\n';
      return 1;
    }
  }
  return 0;
}
