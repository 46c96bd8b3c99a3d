#include <byteps/server/tables.hpp>
#include <byteps/embedding/messages.hpp>
#include <byteps/embedding/optimizer.hpp>
#include <byteps/embedding/placement.hpp>
#include <byteps/embedding/shard.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
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
