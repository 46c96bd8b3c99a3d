#pragma once
// Embedding tables' exact check, shared by the tcp, ipc and emulated-RDMA clusters: every worker
// pushes rows (with duplicates, and some rounds none), then pulls what the job touched, and each
// pulled row must equal, bit for bit, an independent reference of the documented semantics
// (embedding/optimizer.hpp, docs/tables.md): a worker sums its duplicates in float32 in call
// order and rounds to the table's type once; a server sums each row over the workers in rank
// order and applies the optimizer once per round, in float32, storing the row rounded to the
// table's type.
#include <byteps/bodies.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cluster.hpp"

namespace bps::test::tables {

// The reference's own rounding to the stored type (reduce/half.hpp's exact conversions).
inline float stored(float x, dtype t) {
  if (t == dtype::float16) return to_float(to_float16(x));
  if (t == dtype::bfloat16) return to_float(to_bfloat16(x));
  return x;
}

template <class E>
E as_element(float x) {
  if constexpr (std::is_same_v<E, float16>)
    return to_float16(x);
  else if constexpr (std::is_same_v<E, bfloat16>)
    return to_bfloat16(x);
  else
    return x;
}

template <class E>
float as_float(E x) {
  if constexpr (std::is_same_v<E, float>)
    return x;
  else
    return to_float(x);
}

struct optimizer_ref {
  std::string kind;
  float lr = 0, eps = 0, beta1 = 0.9f, beta2 = 0.999f;
};

// The documented update of one row, written out here on its own.
struct row_ref {
  std::vector<float> w, h, m, v;
  std::uint64_t t = 0;
};

class table_ref {
 public:
  table_ref(table_spec spec, optimizer_ref opt) : spec_(std::move(spec)), opt_(std::move(opt)) {}

  std::vector<float> row(std::uint64_t id) { return get(id).w; }

  // One round: by rank, each worker's (ids, grads as the worker passed them).
  void round(const std::vector<std::pair<std::vector<std::uint64_t>, std::vector<float>>>& by_rank) {
    const std::size_t dim = spec_.dim;
    std::map<std::uint64_t, std::vector<float>> sum;
    std::vector<std::uint64_t> seen_order;
    for (const auto& [ids, grads] : by_rank) {
      std::map<std::uint64_t, std::vector<float>> mine;
      std::vector<std::uint64_t> order;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        auto [it, fresh] = mine.try_emplace(ids[i]);
        if (fresh) {
          it->second.assign(grads.begin() + i * dim, grads.begin() + (i + 1) * dim);
          order.push_back(ids[i]);
        } else {
          for (std::size_t j = 0; j < dim; ++j) it->second[j] += grads[i * dim + j];
        }
      }
      for (auto id : order) {
        auto g = mine[id];
        for (auto& x : g) x = stored(x, spec_.type);
        auto [it, fresh] = sum.try_emplace(id, g);
        if (!fresh)
          for (std::size_t j = 0; j < dim; ++j) it->second[j] += g[j];
      }
    }
    for (auto& [id, g] : sum) {
      auto& r = get(id);
      if (opt_.kind == "sgd") {
        for (std::size_t j = 0; j < dim; ++j) r.w[j] = r.w[j] - opt_.lr * g[j];
      } else if (opt_.kind == "adagrad") {
        for (std::size_t j = 0; j < dim; ++j) {
          r.h[j] += g[j] * g[j];
          r.w[j] = r.w[j] - opt_.lr * g[j] / (std::sqrt(r.h[j]) + opt_.eps);
        }
      } else {
        ++r.t;
        const float c1 = static_cast<float>(1.0 - std::pow(double(opt_.beta1), double(r.t)));
        const float c2 = static_cast<float>(1.0 - std::pow(double(opt_.beta2), double(r.t)));
        for (std::size_t j = 0; j < dim; ++j) {
          r.m[j] = opt_.beta1 * r.m[j] + (1.0f - opt_.beta1) * g[j];
          r.v[j] = opt_.beta2 * r.v[j] + (1.0f - opt_.beta2) * g[j] * g[j];
          r.w[j] = r.w[j] - opt_.lr * (r.m[j] / c1) / (std::sqrt(r.v[j] / c2) + opt_.eps);
        }
      }
      for (auto& x : r.w) x = stored(x, spec_.type);
    }
  }

 private:
  row_ref& get(std::uint64_t id) {
    auto [it, fresh] = rows_.try_emplace(id);
    if (fresh) {
      auto& r = it->second;
      for (std::uint32_t j = 0; j < spec_.dim; ++j)
        r.w.push_back(stored(embedding::initial_value(spec_.seed, id, j, spec_.init_scale), spec_.type));
      r.h.assign(spec_.dim, 0.0f);
      r.m.assign(spec_.dim, 0.0f);
      r.v.assign(spec_.dim, 0.0f);
    }
    return it->second;
  }

  table_spec spec_;
  optimizer_ref opt_;
  std::map<std::uint64_t, row_ref> rows_;
};

// Worker `rank`'s ids and gradients in round `round`: duplicates in most rounds, none at all in
// some (rank 1 in round 2), ids spread over the table.
inline std::pair<std::vector<std::uint64_t>, std::vector<float>> step_of(int rank, int round,
                                                                  const table_spec& spec) {
  std::vector<std::uint64_t> ids;
  if (!(rank == 1 && round == 2)) {
    const int n = 5 + (rank + round) % 4;
    for (int i = 0; i < n; ++i)
      ids.push_back(static_cast<std::uint64_t>((rank * 7 + round * 13 + i * i * 3) % spec.rows));
    ids.push_back(ids.front());  // a duplicate
  }
  std::vector<float> grads(ids.size() * spec.dim);
  for (std::size_t i = 0; i < grads.size(); ++i)
    grads[i] = stored(0.25f * static_cast<float>((rank + 1) * (round + 2)) -
                          0.125f * static_cast<float>(i % 7) + 0.01f * static_cast<float>(i),
                      spec.type);
  return {ids, grads};
}

// Each worker declares `spec`, then for `rounds` rounds pushes its step and pulls every id the
// job touched so far, checking each row against the reference. `pushing(round)`, if given, runs
// while this worker's push of that round is in flight (a failover test kills a server there).
template <class E, class Comm>
void exact_rounds(Comm& comm, const table_spec& spec, const optimizer_ref& opt, int rounds,
                  const std::function<void(int)>& pushing = {}) {
  comm.declare_table(spec);
  comm.declare_table(spec);  // again alike: nothing happens
  table_ref ref(spec, opt);
  std::vector<std::uint64_t> touched;
  for (int r = 1; r <= rounds; ++r) {
    std::vector<std::pair<std::vector<std::uint64_t>, std::vector<float>>> by_rank;
    for (int w = 0; w < comm.size(); ++w) by_rank.push_back(step_of(w, r, spec));
    ref.round(by_rank);
    auto [ids, grads] = by_rank[static_cast<std::size_t>(comm.rank())];
    std::vector<E> g(grads.size());
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = as_element<E>(grads[i]);
    auto pushed = comm.push_rows(spec.name, ids, std::span(g));
    if (pushing) pushing(r);
    pushed.wait();
    for (const auto& [w_ids, w_grads] : by_rank) touched.insert(touched.end(), w_ids.begin(), w_ids.end());
    std::vector<E> out(touched.size() * spec.dim);
    comm.pull_rows(spec.name, touched, std::span(out)).wait();
    for (std::size_t i = 0; i < touched.size(); ++i) {
      const auto want = ref.row(touched[i]);
      for (std::uint32_t j = 0; j < spec.dim; ++j) {
        const float got = as_float(out[i * spec.dim + j]);
        BPS_EXPECT(got == want[j] || (std::isnan(got) && std::isnan(want[j])),
                   "table '{}' ({}, {}) round {} worker {}: row {} column {} is {}, the reference {}",
                   spec.name, spec.optimizer, dtype_name(spec.type), r, comm.rank(), touched[i], j,
                   got, want[j]);
      }
    }
  }
}

inline table_spec spec_of(std::string name, std::string optimizer, dtype type, std::uint32_t dim = 6) {
  table_spec s;
  s.name = std::move(name);
  s.rows = 1000;
  s.dim = dim;
  s.type = type;
  s.optimizer = std::move(optimizer);
  s.init_scale = 0.5;
  s.seed = 42;
  return s;
}

// Asynchronous training in exact arithmetic: rows of 3 start at 0, gradients are eighths and lr
// is 1/2 (`spec()`), so every sum is exact and the rows after every worker's pushes do not
// depend on the order the servers applied them in. Worker `rank` pushes `ids(rank, round)`.
struct async_rows_exact {
  std::string table;
  int workers = 3;
  int rounds = 4;
  bool more_ids = false;  ///< one more shared id per push

  table_spec spec() const {
    auto s = spec_of(table, "sgd:lr=0.5", dtype::float32, 3);
    s.init_scale = 0;
    return s;
  }
  std::vector<std::uint64_t> ids(int rank, int round) const {
    std::vector<std::uint64_t> v{static_cast<std::uint64_t>(rank + round), 7, 500,
                                 static_cast<std::uint64_t>(rank * 100 + 3)};
    if (more_ids) v.push_back(501);
    return v;
  }
  static float grad(int rank, int round, std::uint64_t id, std::uint32_t j) {
    return static_cast<float>((rank + 1) * round + static_cast<int>(id % 5) - static_cast<int>(j)) /
           8.0f;
  }
  std::vector<float> grads(int rank, int round) const {
    std::vector<float> g;
    for (auto id : ids(rank, round))
      for (std::uint32_t j = 0; j < 3; ++j) g.push_back(grad(rank, round, id, j));
    return g;
  }

  // After every worker's pushes are in (a barrier): every row equals minus half the sum of its
  // gradients, exactly.
  template <class Comm>
  void check(Comm& comm) const {
    std::map<std::uint64_t, std::vector<float>> want;
    for (int w = 0; w < workers; ++w)
      for (int r = 1; r <= rounds; ++r)
        for (auto id : ids(w, r)) {
          auto& row = want.try_emplace(id, std::vector<float>(3, 0.0f)).first->second;
          for (std::uint32_t j = 0; j < 3; ++j) row[j] -= 0.5f * grad(w, r, id, j);
        }
    std::vector<std::uint64_t> all;
    for (const auto& entry : want) all.push_back(entry.first);
    std::vector<float> out(all.size() * 3);
    comm.pull_rows(table, all, std::span(out)).wait();
    for (std::size_t i = 0; i < all.size(); ++i)
      for (std::uint32_t j = 0; j < 3; ++j)
        BPS_EXPECT(out[i * 3 + j] == want[all[i]][j], "async: row {} column {} is {}, expected {}",
                   all[i], j, out[i * 3 + j], want[all[i]][j]);
  }
};

inline const std::vector<std::pair<std::string, optimizer_ref>> optimizers = {
    {"sgd:lr=0.1", {"sgd", 0.1f, 0}},
    {"adagrad:lr=0.05,eps=1e-6", {"adagrad", 0.05f, 1e-6f}},
    {"adam:lr=0.01,beta1=0.8,beta2=0.99,eps=1e-7", {"adam", 0.01f, 1e-7f, 0.8f, 0.99f}},
};

}  // namespace bps::test::tables
