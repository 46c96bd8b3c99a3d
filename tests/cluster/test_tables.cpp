#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <string>
#include <vector>

#include "cluster.hpp"
#include "run_cluster.hpp"
#include "server_access.hpp"
#include "tables_reference.hpp"

// Embedding tables in real in-process clusters: rows exact against the reference
// (tables_reference.hpp) over tcp and ipc<tcp>, empty calls, every refusal, the server's INFO
// line.

using namespace bps;

namespace tables_test {

using namespace bps::test::tables;

using tcp_comm = test::comm_t;
using ipc_net = transport::ipc<transport::tcp>;
using ipc_comm = Communicator<ipc_net, local::none, partition::by_bytes, schedule::priority>;

template <class E, class Net, class Comm>
void run_exact(int workers, int servers, dtype type) {
  for (const auto& entry : optimizers) {
    const auto& recipe = entry.first;  // not a structured binding: clang 14 cannot capture one
    const auto& opt = entry.second;
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

TEST_CASE("tables: rows equal the reference with 2 local ranks a machine - 2 machines x 2 servers, local::host") {
  // Each local process is a worker of the table's rounds, in global-rank order.
  for (const auto& entry : optimizers) {
    const auto& recipe = entry.first;  // not a structured binding: clang 14 cannot capture one
    const auto& opt = entry.second;
    INFO(recipe);
    const auto spec = spec_of("emb_local_" + opt.kind, recipe, dtype::float32);
    test::run_cluster<transport::tcp, test::host_comm_t>(
        test::base_config(2, 2), {2, 2},
        [&](test::host_comm_t& comm) { exact_rounds<float>(comm, spec, opt, 3); });
  }
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
    auto wide = spec_of("emb_wide", "sgd", dtype::float32, 65536);  // 256 KiB a row
    comm.declare_table(wide);
    std::vector<std::uint64_t> many(60);  // about 7.5 MiB for each of the 2 servers
    for (std::size_t i = 0; i < many.size(); ++i) many[i] = i;
    std::vector<float> wide_rows(many.size() * 65536);
    auto frame = message_of<usage_error>([&] { comm.pull_rows("emb_wide", many, std::span(wide_rows)); });
    BPS_EXPECT(frame.find("pull_rows of table 'emb_wide': the rows for server") != std::string::npos &&
                   frame.find("more than a frame may carry") != std::string::npos,
               "{}", frame);
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

namespace tables_test {

// A fresh folder under TMPDIR (the suite's sandbox), removed when the test ends.
struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "bps-tables-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = pattern;
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
};

// Rounds [first, last] of the exact job's steps for `spec`, every worker pushing its own.
void push_rounds(tcp_comm& comm, const table_spec& spec, int first, int last) {
  for (int r = first; r <= last; ++r) {
    auto [ids, grads] = step_of(comm.rank(), r, spec);
    comm.push_rows(spec.name, ids, std::span(grads)).wait();
  }
}

}  // namespace tables_test

TEST_CASE("tables: a checkpoint saved after 3 rounds and loaded by a new job goes on as if never stopped - adam, 2 workers x 2 servers") {
  temp_dir dir;
  const auto& [recipe, opt] = optimizers[2];  // adam: moments and step counts must survive
  const auto spec = spec_of("emb_ckpt", recipe, dtype::float32);
  test::run_cluster<transport::tcp, tcp_comm>(test::base_config(2, 2), {1, 1}, [&](tcp_comm& comm) {
    comm.declare_table(spec);
    push_rounds(comm, spec, 1, 3);
    comm.barrier();
    if (comm.rank() == 0) comm.save_table(spec.name, dir.path.string());
    comm.barrier();
  });
  std::ifstream manifest(embedding::manifest_file(dir.path.string(), spec.name));
  const std::string text((std::istreambuf_iterator<char>(manifest)), std::istreambuf_iterator<char>());
  INFO(text);
  CHECK(text.starts_with("byteps embedding table checkpoint 1\nname emb_ckpt\nrows 1000\ndim 6\n"));
  CHECK(text.find("servers 2\nshard 0 emb_ckpt-") != std::string::npos);
  CHECK(text.find(".shard-1-of-2 rows ") != std::string::npos);

  table_ref ref(spec, opt);
  std::vector<std::uint64_t> touched;
  for (int r = 1; r <= 5; ++r) {
    std::vector<std::pair<std::vector<std::uint64_t>, std::vector<float>>> by_rank;
    for (int w = 0; w < 2; ++w) by_rank.push_back(step_of(w, r, spec));
    ref.round(by_rank);
    for (const auto& [ids, grads] : by_rank) touched.insert(touched.end(), ids.begin(), ids.end());
  }
  test::run_cluster<transport::tcp, tcp_comm>(test::base_config(2, 2), {1, 1}, [&](tcp_comm& comm) {
    comm.declare_table(spec);
    comm.load_table(spec.name, dir.path.string());
    push_rounds(comm, spec, 4, 5);
    std::vector<float> out(touched.size() * spec.dim);
    comm.pull_rows(spec.name, touched, std::span(out)).wait();
    for (std::size_t i = 0; i < touched.size(); ++i) {
      const auto want = ref.row(touched[i]);
      for (std::uint32_t j = 0; j < spec.dim; ++j)
        BPS_EXPECT(out[i * spec.dim + j] == want[j],
                   "after the checkpoint, worker {}: row {} column {} is {}, the uninterrupted "
                   "reference {}",
                   comm.rank(), touched[i], j, out[i * spec.dim + j], want[j]);
    }
  });
}

TEST_CASE("tables: a checkpoint that cannot be loaded is refused, naming the file and why") {
  temp_dir dir;
  const auto spec = spec_of("emb_ckpt_bad", "adagrad:lr=0.1", dtype::float32);
  const auto where = dir.path.string();
  test::run_cluster<transport::tcp, tcp_comm>(test::base_config(1, 2), {1}, [&](tcp_comm& comm) {
    comm.declare_table(spec);
    push_rounds(comm, spec, 1, 2);
    comm.save_table(spec.name, where);
    auto missing = test::message_of<usage_error>([&] { comm.load_table(spec.name, where + "/none"); });
    BPS_EXPECT(missing.find("cannot read the manifest " + where + "/none/emb_ckpt_bad-") !=
                   std::string::npos,
               "{}", missing);
  });
  // Another declaration: each server names the field that differs.
  test::run_cluster<transport::tcp, tcp_comm>(test::base_config(1, 2), {1}, [&](tcp_comm& comm) {
    auto other = spec;
    other.dim = 8;
    comm.declare_table(other);
    auto text = test::message_of<usage_error>([&] { comm.load_table(spec.name, where); });
    BPS_EXPECT(text.find("was saved from another declaration (dim 6 against 8: the file's, then "
                         "the job's)") != std::string::npos,
               "{}", text);
  });
  // Another server count.
  test::run_cluster<transport::tcp, tcp_comm>(test::base_config(1, 3), {1}, [&](tcp_comm& comm) {
    comm.declare_table(spec);
    auto text = test::message_of<usage_error>([&] { comm.load_table(spec.name, where); });
    BPS_EXPECT(text.find("was saved by 2 servers, this job has 3") != std::string::npos, "{}", text);
  });
  // A damaged shard file.
  const auto shard = embedding::shard_file(where, spec.name, 1, 2);
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x5a');
  }
  test::run_cluster<transport::tcp, tcp_comm>(test::base_config(1, 2), {1}, [&](tcp_comm& comm) {
    comm.declare_table(spec);
    auto text = test::message_of<usage_error>([&] { comm.load_table(spec.name, where); });
    BPS_EXPECT(text.find("load_table of 'emb_ckpt_bad' on server 1: the shard file " + shard +
                         " is damaged: its checksum does not match its bytes") != std::string::npos,
               "{}", text);
  });
}

namespace tables_test {

// Asynchronous training's servers (server::async_sum for dense tensors; tables apply each push
// as it comes).
void run_async(Config cfg, std::vector<int> machines, const std::function<void(tcp_comm&)>& body) {
  cfg.enable_async = true;
  test::run_cluster<transport::tcp, tcp_comm, transport::tcp, server::async_sum>(cfg, std::move(machines), body);
}

}  // namespace tables_test

TEST_CASE("tables: in async mode every push is applied as it comes - sgd in exact arithmetic, 3 workers x 2 servers") {
  const async_rows_exact job{.table = "emb_async"};
  run_async(test::base_config(3, 2), {1, 1, 1}, [&](tcp_comm& comm) {
    comm.declare_table(job.spec());
    for (int r = 1; r <= job.rounds; ++r) {
      const auto g = job.grads(comm.rank(), r);
      comm.push_rows(job.table, job.ids(comm.rank(), r), std::span(g)).wait();
    }
    comm.barrier();  // every worker's pushes are applied
    job.check(comm);
  });
}

TEST_CASE("tables: in async mode with staleness 0 a worker's push waits for the slowest worker's") {
  auto cfg = test::base_config(2, 1);
  cfg.async_staleness = 0;
  const auto spec = spec_of("emb_stale", "sgd:lr=0.5", dtype::float32, 2);
  run_async(cfg, {1, 1}, [&](tcp_comm& comm) {
    comm.declare_table(spec);
    std::vector<std::uint64_t> ids = {1};
    std::vector<float> g = {1.0f, 1.0f};
    if (comm.rank() == 0) {
      auto h = comm.push_rows(spec.name, ids, std::span(g));
      BPS_EXPECT(!h.wait_for(std::chrono::milliseconds(300)),
                 "rank 0's push completed while rank 1 had pushed nothing (staleness 0)");
      comm.barrier();
      h.wait();  // rank 1's push released it
    } else {
      comm.barrier();  // rank 0's push is held
      comm.push_rows(spec.name, ids, std::span(g)).wait();
    }
  });
}

TEST_CASE("tables: in async mode a push completes alone and its update is seen before the others push") {
  auto spec = spec_of("emb_alone", "sgd:lr=0.5", dtype::float32, 2);
  spec.init_scale = 0;
  run_async(test::base_config(2, 2), {1, 1}, [&](tcp_comm& comm) {
    comm.declare_table(spec);
    std::vector<std::uint64_t> ids = {3};
    std::vector<float> g = {1.0f, -2.0f};
    if (comm.rank() == 0) {
      comm.push_rows(spec.name, ids, std::span(g)).wait();  // rank 1 has pushed nothing
      std::vector<float> row(2);
      comm.pull_rows(spec.name, ids, std::span(row)).wait();
      BPS_EXPECT(row[0] == -0.5f && row[1] == 1.0f, "after rank 0's push alone: {} {}", row[0], row[1]);
      comm.barrier();
    } else {
      comm.barrier();  // rank 0 pushed and pulled
      comm.push_rows(spec.name, ids, std::span(g)).wait();
      std::vector<float> row(2);
      comm.pull_rows(spec.name, ids, std::span(row)).wait();
      BPS_EXPECT(row[0] == -1.0f && row[1] == 2.0f, "after both pushes: {} {}", row[0], row[1]);
    }
  });
}
