#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <string>
#include <vector>

#include "cluster.hpp"
#include "run_cluster.hpp"
#include "server_access.hpp"

// Embedding tables in real in-process clusters: every worker pushes rows (with duplicates, and
// some rounds none), then pulls what it touched, and each pulled row must equal, bit for bit,
// an independent reference of the documented semantics (table/optimizer.hpp, docs/tables.md):
// a worker sums its duplicates in float32 in call order and rounds to the table's type once;
// a server sums each row over the workers in rank order and applies the optimizer once per
// round, in float32, storing the row rounded to the table's type.

using namespace bps;

namespace tables_test {

using tcp_comm = test::comm_t;
using ipc_net = transport::ipc<transport::tcp>;
using ipc_comm = Communicator<ipc_net, local::none, partition::by_bytes, schedule::priority>;

// The reference's own rounding to the stored type (reduce/half.hpp's exact conversions).
float stored(float x, dtype t) {
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
std::pair<std::vector<std::uint64_t>, std::vector<float>> step_of(int rank, int round,
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
// job touched so far, checking each row against the reference.
template <class E, class Comm>
void exact_rounds(Comm& comm, const table_spec& spec, const optimizer_ref& opt, int rounds) {
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
    comm.push_rows(spec.name, ids, std::span(g)).wait();
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

table_spec spec_of(std::string name, std::string optimizer, dtype type, std::uint32_t dim = 6) {
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

const std::vector<std::pair<std::string, optimizer_ref>> optimizers = {
    {"sgd:lr=0.1", {"sgd", 0.1f, 0}},
    {"adagrad:lr=0.05,eps=1e-6", {"adagrad", 0.05f, 1e-6f}},
    {"adam:lr=0.01,beta1=0.8,beta2=0.99,eps=1e-7", {"adam", 0.01f, 1e-7f, 0.8f, 0.99f}},
};

template <class E, class Net, class Comm>
void run_exact(int workers, int servers, dtype type) {
  for (const auto& [recipe, opt] : optimizers) {
    INFO(recipe << " on " << workers << " workers x " << servers << " servers");
    auto cfg = test::base_config(workers, servers);
    const auto spec = spec_of("emb_" + opt.kind, recipe, type);
    test::run_cluster<Net, Comm>(cfg, std::vector<int>(static_cast<std::size_t>(workers), 1),
                                 [&](Comm& comm) { exact_rounds<E>(comm, spec, opt, 3); });
  }
}

}  // namespace tables_test

using namespace tables_test;

TEST_CASE("tables: sgd, adagrad and adam rows equal the reference - float32, 1-3 workers x 1-3 servers over tcp") {
  run_exact<float, transport::tcp, tcp_comm>(1, 1, dtype::float32);
  run_exact<float, transport::tcp, tcp_comm>(2, 3, dtype::float32);
  run_exact<float, transport::tcp, tcp_comm>(3, 2, dtype::float32);
}

TEST_CASE("tables: float16 and bfloat16 storage computes in float32 and rounds once - 2 workers x 2 servers") {
  run_exact<float16, transport::tcp, tcp_comm>(2, 2, dtype::float16);
  run_exact<bfloat16, transport::tcp, tcp_comm>(2, 2, dtype::bfloat16);
}

TEST_CASE("tables: rows equal the reference over ipc<tcp> - 2 workers x 2 servers") {
  run_exact<float, ipc_net, ipc_comm>(2, 2, dtype::float32);
}

TEST_CASE("tables: an empty pull is done at once, an empty push round changes nothing") {
  auto cfg = test::base_config(2, 2);
  test::run_cluster<transport::tcp, tcp_comm>(cfg, {1, 1}, [&](tcp_comm& comm) {
    const auto spec = spec_of("emb_empty", "sgd:lr=1", dtype::float32, 4);
    comm.declare_table(spec);
    std::vector<float> none;
    auto h = comm.pull_rows(spec.name, std::vector<std::uint64_t>{}, std::span(none));
    BPS_EXPECT(h.ready(), "an empty pull is done when it returns");
    h.wait();
    comm.push_rows(spec.name, std::vector<std::uint64_t>{}, std::span(none)).wait();
    std::vector<std::uint64_t> ids = {0, 999, 500};
    std::vector<float> out(ids.size() * 4);
    comm.pull_rows(spec.name, ids, std::span(out)).wait();
    for (std::size_t i = 0; i < ids.size(); ++i)
      for (std::uint32_t j = 0; j < 4; ++j)
        BPS_EXPECT(out[i * 4 + j] == embedding::initial_value(42, ids[i], j, 0.5),
                   "row {} column {} is {}, its initial value {}", ids[i], j, out[i * 4 + j],
                   embedding::initial_value(42, ids[i], j, 0.5));
  });
}

TEST_CASE("tables: what a worker passes wrong is refused, naming the table and the value") {
  auto cfg = test::base_config(1, 2);
  test::run_cluster<transport::tcp, tcp_comm>(cfg, {1}, [&](tcp_comm& comm) {
    using test::message_of;
    const auto spec = spec_of("emb_refusals", "adagrad:lr=0.1", dtype::float32, 4);
    std::vector<std::uint64_t> ids = {1, 2};
    std::vector<float> rows(8);
    auto undeclared = message_of<usage_error>([&] { comm.pull_rows("nope", ids, std::span(rows)); });
    BPS_EXPECT(undeclared.find("pull_rows of table 'nope': no such table was declared") !=
                   std::string::npos,
               "{}", undeclared);
    comm.declare_table(spec);
    std::vector<std::uint64_t> far = {1, 1000};
    auto range = message_of<usage_error>([&] { comm.pull_rows(spec.name, far, std::span(rows)); });
    BPS_EXPECT(range.find("row id 1000 (at index 1) is out of range (the table has 1000 rows)") !=
                   std::string::npos,
               "{}", range);
    std::vector<float> short_rows(7);
    auto dim = message_of<usage_error>([&] { comm.push_rows(spec.name, ids, std::span(short_rows)); });
    BPS_EXPECT(dim.find("2 ids of dim 4 need 8 elements, the call passes 7") != std::string::npos,
               "{}", dim);
    std::vector<double> doubles(8);
    auto type = message_of<usage_error>([&] { comm.pull_rows(spec.name, ids, std::span(doubles)); });
    BPS_EXPECT(type.find("the table holds float32, the call passes float64") != std::string::npos,
               "{}", type);
    auto other = spec;
    other.dim = 8;
    auto redeclared = message_of<usage_error>([&] { comm.declare_table(other); });
    BPS_EXPECT(redeclared.find("declared it before with other values (dim 4 against 8") !=
                   std::string::npos,
               "{}", redeclared);
    auto bad_rule = spec_of("emb_bad", "momentum:lr=0.1", dtype::float32);
    auto rule = message_of<usage_error>([&] { comm.declare_table(bad_rule); });
    BPS_EXPECT(rule.find("the optimizer of table 'emb_bad' is 'momentum:lr=0.1': not sgd, adagrad "
                         "or adam") != std::string::npos,
               "{}", rule);
    auto bad_param = spec_of("emb_bad", "sgd:lr=0.1,beta1=0.9", dtype::float32);
    auto param = message_of<usage_error>([&] { comm.declare_table(bad_param); });
    BPS_EXPECT(param.find("sgd takes no parameter 'beta1'") != std::string::npos, "{}", param);
    auto no_rows = spec;
    no_rows.name = "emb_empty_table";
    no_rows.rows = 0;
    auto empty = message_of<usage_error>([&] { comm.declare_table(no_rows); });
    BPS_EXPECT(empty.find("'emb_empty_table': the table has no rows") != std::string::npos, "{}",
               empty);
  });
}

TEST_CASE("tables: a second push_rows of a table while the first waits for the round is refused") {
  auto cfg = test::base_config(2, 2);
  test::run_cluster<transport::tcp, tcp_comm>(cfg, {1, 1}, [&](tcp_comm& comm) {
    const auto spec = spec_of("emb_one_push", "sgd:lr=0.1", dtype::float32, 4);
    comm.declare_table(spec);
    std::vector<std::uint64_t> ids = {1, 2};
    std::vector<float> grads(8, 1.0f);
    if (comm.rank() == 0) {
      auto first = comm.push_rows(spec.name, ids, std::span(grads));  // waits for rank 1's
      auto text = test::message_of<usage_error>(
          [&] { comm.push_rows(spec.name, ids, std::span(grads)); });
      BPS_EXPECT(text.find("push_rows of table 'emb_one_push': the previous push_rows of this "
                           "table is still in flight; wait on its handle first") !=
                     std::string::npos,
                 "{}", text);
      comm.barrier();
      first.wait();
    } else {
      comm.barrier();  // rank 0 has tried its second push
      comm.push_rows(spec.name, ids, std::span(grads)).wait();
    }
  });
}

TEST_CASE("tables: a declaration that differs from another worker's is refused by the server") {
  auto cfg = test::base_config(2, 1);
  std::atomic<int> refused{0};
  test::run_cluster<transport::tcp, tcp_comm>(cfg, {1, 1}, [&](tcp_comm& comm) {
    auto spec = spec_of("emb_disagree", "sgd:lr=0.1", dtype::float32, 4);
    if (comm.rank() == 0) {
      comm.declare_table(spec);
      comm.barrier();
      return;
    }
    comm.barrier();  // rank 0's declaration is in
    {
      spec.optimizer = "sgd:lr=0.2";
      auto text = test::message_of<usage_error>([&] { comm.declare_table(spec); });
      BPS_EXPECT(text.find("another worker declared it differently (optimizer 'sgd:lr=0.1' "
                           "against 'sgd:lr=0.2': theirs, then this worker's)") != std::string::npos,
                 "{}", text);
      ++refused;
      spec.optimizer = "sgd:lr=0.1";
    }
    comm.declare_table(spec);  // the corrected declaration is sent again and taken
  });
  CHECK(refused == 1);
}

TEST_CASE("tables: a server's INFO line says how many rows and bytes its tables hold") {
  auto cfg = test::base_config(1, 1);
  cfg.log = log_level::info;
  cfg.server_log_interval = std::chrono::milliseconds(100);
  std::mutex mu;
  std::vector<std::string> lines;
  {
    test::basic_cluster<> c(cfg, [&](test::basic_cluster<>::server_type& s) {
      testing::server_access::log(s).set_sink([&](log_level, std::string_view line) {
        std::lock_guard lock(mu);
        lines.emplace_back(line);
      });
    });
    c.run_workers([](tcp_comm& comm, int) {
      // 64 float32 a row with adam: 256 bytes of row, 512 of m and v, 8 of its step.
      comm.declare_table(spec_of("emb_info", "adam", dtype::float32, 64));
      std::vector<std::uint64_t> ids(1000);
      for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = i;
      std::vector<float> rows(ids.size() * 64, 0.5f);
      comm.push_rows("emb_info", ids, std::span(rows)).wait();
      comm.pull_rows("emb_info", ids, std::span(rows)).wait();
    });
  }
  std::string last;
  for (const auto& l : lines)
    if (l.find("embedding tables:") != std::string::npos) last = l;
  INFO(last);
  CHECK(last.find("; embedding tables: 1 shard, 1000 rows, 0.776 MB with optimizer state") !=
        std::string::npos);
}
