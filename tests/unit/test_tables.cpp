#include <byteps/server/tables.hpp>
#include <byteps/embedding/journal.hpp>
#include <byteps/embedding/messages.hpp>
#include <byteps/embedding/optimizer.hpp>
#include <byteps/embedding/placement.hpp>
#include <byteps/embedding/shard.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

// Embedding tables' parts alone: the optimizer's recipe, the request payloads, where rows live
// and how they start, and a server's answers to requests it must refuse.

using namespace bps;

namespace table_unit {

std::string parse_error(const std::string& recipe) {
  try {
    embedding::optimizer::parse(recipe, "emb");
  } catch (const usage_error& e) {
    return e.what();
  }
  return "(accepted)";
}

table_spec small_spec() {
  table_spec s;
  s.name = "emb";
  s.rows = 100;
  s.dim = 2;
  s.optimizer = "sgd:lr=0.5";
  s.init_scale = 0;
  return s;
}

// A request as a worker sends it: `ids`, and for a push `grads` (float32 tables).
std::vector<std::byte> request(embedding::op o, const std::vector<std::uint64_t>& ids,
                               const std::vector<float>& grads = {}) {
  auto b = embedding::request_buffer(o, ids.size(), grads.size() * 4);
  for (std::size_t i = 0; i < ids.size(); ++i)
    wire::detail::put_le<std::uint64_t>(b.data() + embedding::request_head_bytes + 8 * i, ids[i]);
  if (!grads.empty())
    std::memcpy(b.data() + embedding::request_head_bytes + 8 * ids.size(), grads.data(),
                grads.size() * 4);
  return b;
}

wire::header head(std::uint64_t round) {
  wire::header h;
  h.type = wire::msg::rows_request;
  h.key = embedding::table_key("emb");
  h.round = round;
  return h;
}

}  // namespace table_unit

using namespace table_unit;

TEST_CASE("table optimizer: recipes are read with their defaults, and each mistake is named") {
  CHECK(embedding::optimizer::parse("sgd", "emb").kind() == embedding::optimizer::rule::sgd);
  CHECK(embedding::optimizer::parse("adagrad:lr=0.1", "emb").state_per_element() == 1);
  CHECK(embedding::optimizer::parse("adam:beta1=0.5", "emb").state_per_element() == 2);
  CHECK_THAT(parse_error("rmsprop"),
             Catch::Contains("the optimizer of table 'emb' is 'rmsprop': not sgd, adagrad or adam"));
  CHECK_THAT(parse_error("adagrad:beta1=0.9"), Catch::Contains("adagrad takes no parameter 'beta1'"));
  CHECK_THAT(parse_error("sgd:lr=fast"), Catch::Contains("lr=fast is not a finite number"));
  CHECK_THAT(parse_error("sgd:lr=0"), Catch::Contains("lr must be positive"));
  CHECK_THAT(parse_error("adam:beta2=1"), Catch::Contains("beta1 and beta2 in [0, 1)"));
  CHECK_THAT(parse_error("sgd:lr"), Catch::Contains("is not key=value"));
}

TEST_CASE("table optimizer: one step of each rule, by hand") {
  float w[2] = {1.0f, -2.0f};
  const float g[2] = {0.5f, -1.0f};
  std::uint64_t t = 0;
  embedding::optimizer::parse("sgd:lr=0.5", "emb").apply(w, g, nullptr, t, 2);
  CHECK(w[0] == 0.75f);
  CHECK(w[1] == -1.5f);
  float h[2] = {0, 0};
  float a[2] = {1.0f, 1.0f};
  embedding::optimizer::parse("adagrad:lr=1,eps=0", "emb").apply(a, g, h, t, 2);
  CHECK(h[0] == 0.25f);
  CHECK(a[0] == 0.0f);  // 1 - 0.5 / sqrt(0.25)
  CHECK(a[1] == 2.0f);  // 1 + 1 / sqrt(1)
  float mv[4] = {0, 0, 0, 0};
  float b[2] = {0.0f, 0.0f};
  embedding::optimizer::parse("adam:lr=0.1,eps=0", "emb").apply(b, g, mv, t, 2);
  CHECK(t == 1);
  // The first bias-corrected step is lr * sign(g), whatever g's size.
  CHECK(b[0] == Approx(-0.1f).epsilon(1e-6));
  CHECK(b[1] == Approx(0.1f).epsilon(1e-6));
}

TEST_CASE("table messages: a declaration round-trips, malformed requests are named") {
  table_spec s = small_spec();
  s.type = dtype::bfloat16;
  s.init_scale = 0.125;
  s.seed = 7;
  const auto d = embedding::decode_request(embedding::encode_declare(s), 0);
  CHECK(d.what == embedding::op::declare);
  CHECK(d.spec == s);
  auto pull = request(embedding::op::pull, {3, 4});
  CHECK(embedding::decode_request(pull, 8).id(1) == 4);
  auto bad = pull;
  bad[0] = std::byte{2};
  CHECK_THROWS_WITH(embedding::decode_request(bad, 8), Catch::Contains("rows_request format 2"));
  bad = pull;
  bad[1] = std::byte{9};
  CHECK_THROWS_WITH(embedding::decode_request(bad, 8), Catch::Contains("unknown op 9"));
  auto push = request(embedding::op::push, {3, 4}, {1, 2, 3});  // a row short
  CHECK_THROWS_WITH(embedding::decode_request(push, 8),
                    Catch::Contains("a push_rows request of 2 ids in 28 bytes"));
  auto huge = request(embedding::op::pull, {1});
  wire::detail::put_le<std::uint64_t>(huge.data() + 8, ~0ull);
  CHECK_THROWS_WITH(embedding::decode_request(huge, 8), Catch::Contains("request of"));
}

TEST_CASE("table placement: ids spread over the servers, initial values are fixed by seed and id") {
  const auto key = embedding::table_key("emb");
  CHECK(key != tensor_key("emb"));
  std::vector<int> per(3, 0);
  for (std::uint64_t id = 0; id < 3000; ++id) ++per[static_cast<std::size_t>(embedding::row_server(key, id, 3))];
  for (int n : per) CHECK((n > 900 && n < 1100));
  std::vector<int> hot(2, 0);  // the 20 hottest ids of a skewed draw are the smallest
  for (std::uint64_t id = 0; id < 20; ++id) ++hot[static_cast<std::size_t>(embedding::row_server(key, id, 2))];
  CHECK(hot[0] >= 5);
  CHECK(hot[1] >= 5);
  std::set<float> seen;
  for (std::uint64_t id = 0; id < 100; ++id) {
    const float v = embedding::initial_value(1, id, 0, 0.5);
    CHECK(v >= -0.5f);
    CHECK(v < 0.5f);
    CHECK(v == embedding::initial_value(1, id, 0, 0.5));
    seen.insert(v);
  }
  CHECK(seen.size() > 95);
  CHECK(embedding::initial_value(1, 5, 0, 0.5) != embedding::initial_value(2, 5, 0, 0.5));
  CHECK(embedding::initial_value(1, 5, 0, 0.5) != embedding::initial_value(1, 5, 1, 0.5));
}

TEST_CASE("table shard: a round's sum is by rank and the optimizer runs once per row") {
  embedding::shard s(small_spec(), embedding::optimizer::parse("sgd:lr=0.5", "emb"), 2);
  std::byte row[8];
  s.read(4, row);  // created at 0 (init_scale 0)
  auto one = request(embedding::op::push, {4, 4}, {1, 2, 3, 4});  // a duplicate from the wire too
  auto r1 = embedding::decode_request(one, 8);
  auto two = request(embedding::op::push, {4}, {10, 20});
  auto r2 = embedding::decode_request(two, 8);
  s.add_push(1, r2.ids, r2.values, r2.count);
  CHECK_FALSE(s.round_complete());
  s.add_push(0, r1.ids, r1.values, r1.count);
  REQUIRE(s.round_complete());
  s.apply_round();
  CHECK(s.round() == 2);
  float w[2];
  s.read(4, row);
  std::memcpy(w, row, 8);
  CHECK(w[0] == -0.5f * 14);
  CHECK(w[1] == -0.5f * 26);
  CHECK(s.rows_held() == 1);
  CHECK(s.bytes() == 8 + 8);  // the row and its step count (sgd keeps no state)
}

TEST_CASE("table server: requests it must refuse are answered with the reason") {
  server::tables t;
  const server::tables::place at{.server = 0, .servers = 1, .num_workers = 2};
  auto undeclared = t.handle(head(1), request(embedding::op::pull, {1}), {0, 0}, at);
  REQUIRE(undeclared.what == server::outcome::kind::refuse);
  CHECK_THAT(undeclared.error, Catch::Contains("server 0 holds no such table"));
  auto declared = t.handle(head(1 | embedding::call_round_bit), embedding::encode_declare(small_spec()), {0, 0}, at);
  CHECK(declared.what == server::outcome::kind::answer_now);
  auto range = t.handle(head(2 | embedding::call_round_bit), request(embedding::op::pull, {100}), {0, 0}, at);
  REQUIRE(range.what == server::outcome::kind::refuse);
  CHECK_THAT(range.error, Catch::Contains("pull_rows of table 'emb': row id 100 is out of range"));
  auto ahead = t.handle(head(2), request(embedding::op::push, {1}, {1, 1}), {0, 0}, at);
  REQUIRE(ahead.what == server::outcome::kind::refuse);
  CHECK_THAT(ahead.error, Catch::Contains("worker 0 pushes round 2, but the table is at round 1"));
  CHECK(t.handle(head(1), request(embedding::op::push, {1}, {1, 1}), {0, 0}, at).what ==
        server::outcome::kind::wait);
  auto twice = t.handle(head(1), request(embedding::op::push, {1}, {1, 1}), {0, 0}, at);
  REQUIRE(twice.what == server::outcome::kind::refuse);
  CHECK_THAT(twice.error, Catch::Contains("worker 0 pushed round 1 twice"));
  CHECK(t.handle(head(1), request(embedding::op::push, {}, {}), {1, 0}, at).what ==
        server::outcome::kind::release);
  const server::tables::place second{.server = 1, .servers = 2, .num_workers = 2};
  server::tables u;
  u.handle(head(1 | embedding::call_round_bit), embedding::encode_declare(small_spec()), {0, 0}, second);
  std::uint64_t other = 0;
  while (embedding::row_server(embedding::table_key("emb"), other, 2) != 0) ++other;
  auto elsewhere = u.handle(head(2 | embedding::call_round_bit), request(embedding::op::pull, {other}), {0, 0}, second);
  REQUIRE(elsewhere.what == server::outcome::kind::refuse);
  CHECK_THAT(elsewhere.error, Catch::Contains("belongs to server 0, not server 1"));
}

namespace table_unit {

// A directory of its own under the system's temporary one, removed at the end.
struct journal_dir {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("bps-journal-unit-" + std::to_string(::getpid()));
  journal_dir() { std::filesystem::create_directories(path); }
  ~journal_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// Server `server` of 2, failover on, journaling into `dir` for job 7.
server::tables::place journaled(int server, const std::string& dir) {
  return {.server = server, .servers = 2, .num_workers = 2, .failover = true, .journal_dir = dir,
          .job_id = 7};
}

// The rows `ids` as `t` answers a pull of them.
std::vector<float> pull(server::tables& t, const std::vector<std::uint64_t>& ids,
                        std::uint64_t call) {
  auto o = t.handle(head(call | embedding::call_round_bit), request(embedding::op::pull, ids),
                    {0, 0}, journaled(0, ""));
  REQUIRE(o.what == server::outcome::kind::answer_now);
  std::vector<float> rows(o.answer.bytes.size() / 4);
  std::memcpy(rows.data(), o.answer.bytes.data(), o.answer.bytes.size());
  return rows;
}

}  // namespace table_unit

TEST_CASE("table journal: records read back as written, and a record cut off or damaged is where replay stops") {
  using embedding::journal;
  using embedding::journal_record;
  journal_dir dir;
  auto spec = small_spec();
  const auto path = journal::file(dir.path.string(), spec.name, 7, 1, 2);
  CHECK_THAT(path, Catch::EndsWith(".job-0000000000000007.journal-1-of-2"));
  journal j(path, spec, 7, 1, 2);
  journal_record snap;
  snap.what = journal_record::kind::snapshot;
  snap.round = 1;
  snap.loaded = "/ckpt";
  snap.rows = {std::byte{1}, std::byte{2}};
  j.start(snap);
  journal_record change;
  change.round = 2;
  change.pushes = {{1024, 5}};
  change.rows = {std::byte{3}};
  CHECK_FALSE(j.append(change));
  change.round = 3;
  change.pushes = {};
  CHECK_FALSE(j.append(change));
  auto back = journal::read(path, spec, 7, 1, 2);
  REQUIRE(back.size() == 3);
  CHECK(back[0].what == journal_record::kind::snapshot);
  CHECK(back[0].loaded == "/ckpt");
  CHECK(back[0].rows == snap.rows);
  CHECK(back[1].round == 2);
  CHECK(back[1].pushes == std::map<std::uint32_t, std::uint64_t>{{1024, 5}});
  CHECK(back[2].round == 3);
  CHECK(back[2].rows == change.rows);

  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 3);  // the last record cut off
  CHECK(journal::read(path, spec, 7, 1, 2).size() == 2);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 34 - 10));  // the last change is 34 bytes
    f.put('\x55');  // inside the first change: its checksum fails
  }
  CHECK(journal::read(path, spec, 7, 1, 2).size() == 1);

  CHECK_THROWS_WITH(journal::read(path, spec, 8, 1, 2),
                    Catch::Contains("the journal " + path) &&
                        Catch::Contains("is server 1 of 2 in job 0000000000000007, not server 1 of 2 in job 0000000000000008"));
  auto other = spec;
  other.dim = 3;
  CHECK_THROWS_WITH(journal::read(path, spec.name == "emb" ? other : spec, 7, 1, 2),
                    Catch::Contains("was written for another declaration (dim"));
  CHECK_THROWS_WITH(journal::read(path + ".none", spec, 7, 1, 2),
                    Catch::Contains("cannot read the journal " + path + ".none"));
}

TEST_CASE("table journal: the file starts again from a snapshot once the changes outweigh it") {
  using embedding::journal;
  using embedding::journal_record;
  journal_dir dir;
  const auto path = journal::file(dir.path.string(), "emb", 7, 0, 2);
  journal j(path, small_spec(), 7, 0, 2);
  journal_record snap;
  snap.what = journal_record::kind::snapshot;
  j.start(snap);
  journal_record change;
  change.rows.resize(64 * 1024);
  int appended = 0;
  while (!j.append(change)) ++appended;
  // The 16th change (16 x 65,569 bytes) passes 1 MiB plus twice the snapshot (a few bytes).
  CHECK(appended == 15);
  j.start(snap);
  CHECK(std::filesystem::file_size(path) == j.bytes());
  CHECK(journal::read(path, small_spec(), 7, 0, 2).size() == 1);
}

TEST_CASE("table server: a replacement replays the journal, answers a re-sent push of a round it holds as done, and goes on") {
  journal_dir dir;
  const auto d = dir.path.string();
  auto spec = small_spec();
  spec.optimizer = "adam:lr=0.1";
  spec.init_scale = 0.5;
  const auto declare = [&](server::tables& t, std::uint64_t pushes_begun) {
    return t.handle(head(1 | embedding::call_round_bit), embedding::encode_declare(spec, pushes_begun),
                    {0, 0}, journaled(0, d));
  };
  std::vector<std::uint64_t> ids;  // rows server 0 of 2 holds
  for (std::uint64_t id = 0; ids.size() < 3; ++id)
    if (embedding::row_server(embedding::table_key("emb"), id, 2) == 0) ids.push_back(id);
  const auto push = [&](server::tables& t, std::uint64_t round, int worker) {
    std::vector<float> g;
    for (std::size_t i = 0; i < ids.size(); ++i)
      for (int j = 0; j < 2; ++j) g.push_back(0.25f * static_cast<float>(round) - 0.5f * worker + 0.125f * j);
    return t.handle(head(round), request(embedding::op::push, ids, g), {worker, 0}, journaled(0, d)).what;
  };
  using kind = server::outcome::kind;
  server::tables dead;
  REQUIRE(declare(dead, 0).what == kind::answer_now);
  for (std::uint64_t r = 1; r <= 3; ++r) {
    CHECK(push(dead, r, 0) == kind::wait);
    CHECK(push(dead, r, 1) == kind::release);
  }
  CHECK(push(dead, 4, 0) == kind::wait);  // round 4 is under way when it dies
  const auto want = pull(dead, ids, 2);

  server::tables replacement;
  REQUIRE(declare(replacement, 4).what == kind::answer_now);
  CHECK(pull(replacement, ids, 2) == want);
  CHECK(push(replacement, 3, 1) == kind::answer_now);  // its answer was lost with the server
  CHECK(push(replacement, 4, 0) == kind::wait);
  CHECK(push(replacement, 4, 1) == kind::release);
  CHECK(push(dead, 4, 1) == kind::release);  // the same round on the first: the same rows
  CHECK(pull(replacement, ids, 3) == pull(dead, ids, 3));

  server::tables lost;  // a replacement that finds no journal after pushes were made
  std::filesystem::remove_all(dir.path);
  std::filesystem::create_directories(dir.path);
  const auto refused = declare(lost, 4);
  REQUIRE(refused.what == kind::refuse);
  CHECK_THAT(refused.error, Catch::Contains("a worker pushed 4 round(s) to the table, but no journal of it is in " + d));
}

TEST_CASE("table server: a round it cannot journal fails for every pusher, and a replacement then refuses the table") {
  journal_dir dir;
  const auto d = dir.path.string();
  auto spec = small_spec();
  spec.rows = 100000;
  server::tables t;
  REQUIRE(t.handle(head(1 | embedding::call_round_bit), embedding::encode_declare(spec), {0, 0},
                   journaled(0, d))
              .what == server::outcome::kind::answer_now);
  std::filesystem::remove_all(dir.path);  // the journal's directory goes away
  // Rows server 0 of 2 holds, enough that one round's record (24 bytes a row) passes the 1 MiB
  // after which the journal starts again from a snapshot, which it cannot write now.
  std::vector<std::uint64_t> ids;
  for (std::uint64_t id = 0; ids.size() < 50000; ++id)
    if (embedding::row_server(embedding::table_key("emb"), id, 2) == 0) ids.push_back(id);
  const std::vector<float> grads(ids.size() * 2, 1.0f);
  CHECK(t.handle(head(1), request(embedding::op::push, ids, grads), {0, 0}, journaled(0, d)).what ==
        server::outcome::kind::wait);
  const auto failed = t.handle(head(1), request(embedding::op::push, ids, grads), {1, 0}, journaled(0, d));
  REQUIRE(failed.what == server::outcome::kind::fail_round);
  CHECK_THAT(failed.error, Catch::Contains("push_rows of table 'emb': server 0 could not journal the change") &&
                               Catch::Contains("cannot create the journal"));
  std::filesystem::create_directories(dir.path);
  server::tables replacement;
  const auto refused = replacement.handle(head(1 | embedding::call_round_bit),
                                          embedding::encode_declare(spec, 1), {0, 0}, journaled(0, d));
  REQUIRE(refused.what == server::outcome::kind::refuse);
  CHECK_THAT(refused.error, Catch::Contains("no journal of it is in " + d));
}
