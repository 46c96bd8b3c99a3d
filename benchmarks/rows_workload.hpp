#pragma once
// The embedding-table benchmark's workload, the same for every system it compares
// (rows_bench.cpp: byteps' tables and dense push_pull; gloo_rows_allgather.cpp: Gloo's
// all-gather of (id, gradient) pairs): a step of each worker draws `batch` ids from a Zipf
// distribution over `rows` (seeded by its rank and the step), with a gradient of `dim` floats
// per id.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rows_bench {

struct workload {
  std::uint64_t rows = 200000;
  std::uint32_t dim = 32;
  int batch = 4096;
  std::vector<double> skews = {0.9, 1.05, 1.2};
  int steps = 30, warmup = 5;
};

// Reads one of workload's flags at argv[i] (and its value); false when it is not one.
inline bool parse_flag(workload& w, int argc, char** argv, int& i) {
  const std::string_view a = argv[i];
  if (a != "--rows" && a != "--dim" && a != "--batch" && a != "--zipf" && a != "--steps" &&
      a != "--warmup")
    return false;
  if (i + 1 >= argc) throw std::invalid_argument(std::string(a) + " needs a value");
  const std::string v = argv[++i];
  if (a == "--rows") w.rows = std::stoull(v);
  if (a == "--dim") w.dim = static_cast<std::uint32_t>(std::stoul(v));
  if (a == "--batch") w.batch = std::stoi(v);
  if (a == "--steps") w.steps = std::stoi(v);
  if (a == "--warmup") w.warmup = std::stoi(v);
  if (a == "--zipf") {
    w.skews.clear();
    std::size_t at = 0;
    while (at <= v.size()) {
      const auto comma = v.find(',', at);
      w.skews.push_back(std::stod(v.substr(at, comma - at)));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
  }
  if (w.rows < 2 || w.dim < 1 || w.batch < 1 || w.steps < 1 || w.warmup < 0)
    throw std::invalid_argument("--rows must be at least 2, --dim, --batch and --steps at least 1");
  return true;
}

inline const char* workload_help() {
  return "  --rows N          table rows (default 200000)\n"
         "  --dim N           floats per row (default 32)\n"
         "  --batch N         ids per worker per step (default 4096)\n"
         "  --zipf S[,S...]   Zipf skews, one run each (default 0.9,1.05,1.2)\n"
         "  --steps N         timed steps per skew (default 30)\n"
         "  --warmup N        untimed steps before them (default 5)\n";
}

// Zipf over 0 .. n-1 by inverse CDF.
class zipf {
 public:
  zipf(std::uint64_t n, double s) : cdf_(n) {
    double sum = 0;
    for (std::uint64_t k = 0; k < n; ++k) cdf_[k] = sum += std::pow(static_cast<double>(k + 1), -s);
    for (auto& c : cdf_) c /= sum;
  }
  std::uint64_t draw(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return static_cast<std::uint64_t>(std::lower_bound(cdf_.begin(), cdf_.end() - 1, u) - cdf_.begin());
  }

 private:
  std::vector<double> cdf_;
};

// One worker's step: its ids (with duplicates) and a gradient per id.
struct step {
  std::vector<std::uint64_t> ids;
  std::vector<float> grads;
};

inline step draw_step(const workload& w, const zipf& z, int rank, int index) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(rank) * 1000003u + static_cast<std::uint64_t>(index));
  step s;
  s.ids.resize(static_cast<std::size_t>(w.batch));
  for (auto& id : s.ids) id = z.draw(rng);
  s.grads.resize(s.ids.size() * w.dim);
  for (std::size_t i = 0; i < s.grads.size(); ++i) s.grads[i] = static_cast<float>(i % 13) * 0.01f;
  return s;
}

// The ids of `s` once each, with their gradients summed: what each system moves.
inline step unique(const step& s, std::uint32_t dim) {
  step u;
  std::unordered_map<std::uint64_t, std::size_t> at;
  for (std::size_t i = 0; i < s.ids.size(); ++i) {
    auto [it, fresh] = at.try_emplace(s.ids[i], u.ids.size());
    if (fresh) {
      u.ids.push_back(s.ids[i]);
      u.grads.insert(u.grads.end(), s.grads.begin() + static_cast<std::ptrdiff_t>(i * dim),
                     s.grads.begin() + static_cast<std::ptrdiff_t>((i + 1) * dim));
    } else {
      for (std::uint32_t j = 0; j < dim; ++j) u.grads[it->second * dim + j] += s.grads[i * dim + j];
    }
  }
  return u;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace rows_bench
