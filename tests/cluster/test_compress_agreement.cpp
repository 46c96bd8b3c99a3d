// How workers and servers agree on a tensor's compressor, and what goes wrong clearly: the
// default from Config and the size threshold, a prototype's own compressor in the server's
// registry, another compressor for one tensor, one the server cannot make, a push that does not
// decode, and failover (not supported with compressors the servers decode).
#include <catch2/catch.hpp>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "cluster.hpp"
#include "faulty_cluster.hpp"

using namespace bps;
using bps::test::cluster;
using bps::test::comm_t;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::uint64_t pushed_bytes(comm_t& comm) {
  const auto s = comm.stats();
  return std::accumulate(s.bytes_per_server.begin(), s.bytes_per_server.end(), std::uint64_t{0});
}

// A prototype's compressor that the servers must decode: sends x / 2 and decodes y * 2 (exact
// for these values), so the answer is the exact sum only if a server decoded and re-encoded.
struct halve {
  std::string name() const { return "halve"; }
  std::size_t max_encoded_bytes(std::size_t bytes, dtype) const { return bytes; }
  std::size_t encode(std::span<const std::byte> in, dtype, std::span<std::byte> out) {
    scale(in, out, 0.5f);
    return in.size();
  }
  void decode(std::span<const std::byte> in, dtype, std::span<std::byte> out) {
    if (in.size() != out.size()) throw usage_error("halve: wrong size");
    scale(in, out, 2.0f);
  }
  static void scale(std::span<const std::byte> in, std::span<std::byte> out, float f) {
    for (std::size_t i = 0; i + 4 <= in.size(); i += 4) {
      float x;
      std::memcpy(&x, in.data() + i, 4);
      x *= f;
      std::memcpy(out.data() + i, &x, 4);
    }
  }
};

// Claims to be onebit (so the server makes one) but writes three bytes of nonsense.
struct broken_onebit {
  std::string name() const { return "onebit"; }
  std::size_t max_encoded_bytes(std::size_t, dtype) const { return 3; }
  std::size_t encode(std::span<const std::byte>, dtype, std::span<std::byte> out) {
    std::memset(out.data(), 0x5a, 3);
    return 3;
  }
  void decode(std::span<const std::byte>, dtype, std::span<std::byte>) {}
};

}  // namespace

TEST_CASE("compression agreement: BYTEPS_COMPRESSOR is every tensor's default - small tensors, "
          "broadcasts and compress::none() travel raw",
          "[cluster][compress]") {
  auto cfg = test::base_config(2, 1);
  cfg.compressor = "ef_onebit:scaling=1";  // min_compress_bytes stays 65536
  cluster c(cfg);
  c.run_workers([&](comm_t& comm, int rank) {
    // 1000 floats (4000 bytes): under the threshold, so raw and the exact sum.
    std::vector<float> small(1000, static_cast<float>(rank + 1) * 0.25f);
    auto before = pushed_bytes(comm);
    comm.push_pull("small", std::span(small)).wait();
    BPS_EXPECT(pushed_bytes(comm) - before == 4000, "small pushed {} bytes",
               pushed_bytes(comm) - before);
    for (float x : small) BPS_EXPECT(x == 0.75f, "small: {}", x);
    // Naming a compressor for it later is no "other compressor" error: it stays raw.
    comm.push_pull("small", std::span(small), {.compressor = compress::by_name("topk", {{"k", "3"}})})
        .wait();
    for (float x : small) BPS_EXPECT(x == 1.5f, "small again: {}", x);

    // 32768 floats (131072 bytes): one bit each, plus a scale and the raw size per partition.
    std::vector<float> big(32768, rank == 0 ? 1.0f : 3.0f);
    before = pushed_bytes(comm);
    comm.push_pull("big", std::span(big)).wait();
    const auto sent = pushed_bytes(comm) - before;
    BPS_EXPECT(sent >= 4096 && sent < 4096 + 64, "big pushed {} bytes", sent);
    // Each worker sends +1 * scale (1 and 3), the server sums 4 and sends it as +4.
    for (float x : big) BPS_EXPECT(x == 4.0f, "big: {}", x);

    // A broadcast arrives exactly, and compress::none() opts a tensor out.
    std::vector<float> params(32768, rank == 0 ? 0.123f : 0.0f);
    comm.broadcast("params", std::span(params), 0).wait();
    for (float x : params) BPS_EXPECT(x == 0.123f, "broadcast: {}", x);
    std::vector<float> raw(32768, 0.1f * static_cast<float>(rank + 1));
    before = pushed_bytes(comm);
    comm.push_pull("raw", std::span(raw), {.compressor = compress::none()}).wait();
    BPS_EXPECT(pushed_bytes(comm) - before == 131072, "raw pushed {}", pushed_bytes(comm) - before);
    for (float x : raw) BPS_EXPECT(x == 0.1f + 0.2f, "raw: {}", x);
  });
}

TEST_CASE("compression agreement: a prototype's compressor works when the server's registry has "
          "it, and is refused naming it when not",
          "[cluster][compress]") {
  auto cfg = test::base_config(2, 2);
  cfg.min_compress_bytes = 0;
  compress::registry reg;
  reg.add("halve", {}, [](const compress::param_reader&) {
    return std::make_unique<compress::holder<halve>>(halve{});
  });
  {
    cluster c(cfg, {}, reg);
    c.run_workers([&](comm_t& comm, int rank) {
      for (int round = 0; round < 3; ++round) {
        std::vector<float> v(3000, static_cast<float>(rank + round));
        comm.push_pull("h", std::span(v), {.compressor = compress::use<halve>()}).wait();
        for (float x : v) BPS_EXPECT(x == static_cast<float>(1 + 2 * round), "h: {}", x);
      }
    });
  }
  cfg.num_workers = 1;
  cfg.num_servers = 1;
  cluster c(cfg);  // the built-ins only
  c.run_workers([&](comm_t& comm, int) {
    std::vector<float> v(100, 1.0f);
    const auto text = test::message_of<usage_error>(
        [&] { comm.push_pull("h", std::span(v), {.compressor = compress::use<halve>()}).wait(); });
    BPS_EXPECT(has(text, "push_pull of 'h'") && has(text, "cannot make compressor 'halve()'") &&
                   has(text, "unknown algorithm 'halve'") && has(text, "onebit, randomk, topk"),
               "message: {}", text);
  });
}

TEST_CASE("compression agreement: two compressors for one tensor - the server refuses the second "
          "naming both",
          "[cluster][compress]") {
  auto cfg = test::base_config(2, 1);
  cfg.min_compress_bytes = 0;
  cfg.op_timeout = std::chrono::seconds(3);  // the worker left alone times out
  cluster c(cfg);
  std::vector<std::string> usage(2), other(2);
  c.run_workers(
      [&](comm_t& comm, int rank) {
        std::vector<float> v(1000, 1.0f);
        auto spec = rank == 0 ? compress::by_name("topk", {{"k", "10"}})
                              : compress::by_name("onebit", {{"scaling", "1"}});
        try {
          comm.push_pull("clash", std::span(v), {.compressor = spec}).wait();
        } catch (const usage_error& e) {
          usage[static_cast<std::size_t>(rank)] = e.what();
        } catch (const std::exception& e) {
          other[static_cast<std::size_t>(rank)] = e.what();
        }
      },
      false);
  // Whichever declared second is refused; the first waits for it until its deadline.
  const int refused = usage[0].empty() ? 1 : 0;
  CAPTURE(usage[0], usage[1], other[0], other[1]);
  CHECK(usage[static_cast<std::size_t>(1 - refused)].empty());
  const auto& text = usage[static_cast<std::size_t>(refused)];
  CHECK(has(text, "tensor 'clash'"));
  CHECK(has(text, "compressor 'topk(k=10)'"));
  CHECK(has(text, "compressor 'onebit(scaling=1)'"));
  CHECK(has(other[static_cast<std::size_t>(1 - refused)], "BYTEPS_OP_TIMEOUT_MS"));
}

TEST_CASE("compression agreement: a push that does not decode is refused naming the tensor, "
          "partition and worker - the server lives on",
          "[cluster][compress]") {
  auto cfg = test::base_config(1, 1);
  cfg.min_compress_bytes = 0;
  cluster c(cfg);
  c.run_workers([&](comm_t& comm, int) {
    std::vector<float> v(100, 1.0f);
    const auto text = test::message_of<usage_error>([&] {
      comm.push_pull("bad", std::span(v), {.compressor = compress::use<broken_onebit>()}).wait();
    });
    BPS_EXPECT(has(text, "malformed compressed push of 'bad' partition 0 from worker 0") &&
                   has(text, "compressor 'onebit(scaling=false)' cannot decode it"),
               "message: {}", text);
    // The server still serves: another tensor, compressed properly, sums.
    std::vector<float> w(100, 2.0f);
    comm.push_pull("good", std::span(w), {.compressor = compress::by_name("fp16")}).wait();
    for (float x : w) BPS_EXPECT(x == 2.0f, "good: {}", x);
  });
}

TEST_CASE("compression agreement: a compressed push whose raw size was corrupted on the way is "
          "refused naming the tensor, partition and worker",
          "[cluster][compress][fault-injection]") {
  using transport::fault;
  auto plan = std::make_shared<transport::fault_plan>();
  // Byte 7 is the top byte of the u64 raw size: inverted, the size is about 2^64.
  auto corrupt = plan->add({.when = {.type = wire::msg::push, .sender = 0},
                            .action = fault::corrupt_payload(7),
                            .times = 1});
  auto cfg = test::base_config(1, 1);
  cfg.min_compress_bytes = 0;
  test::faulty_cluster c(cfg, plan);
  c.run_workers([&](test::faulty_comm_t& comm, int) {
    std::vector<float> v(100, 1.0f);
    const auto text = test::message_of<usage_error>(
        [&] { comm.push_pull("sized", std::span(v), {.compressor = compress::by_name("fp16")}).wait(); });
    BPS_EXPECT(has(text, "malformed compressed push of 'sized' partition 0 from worker 0") &&
                   has(text, "raw size of 18374686479671624080 bytes"),
               "message: {}", text);
    // Only that push was corrupted: the next call goes through, decoded and re-encoded.
    comm.push_pull("other", std::span(v), {.compressor = compress::by_name("fp16")}).wait();
    for (float x : v) BPS_EXPECT(x == 1.0f, "other: {}", x);
  });
  CHECK(plan->fired(corrupt) == 1);
}

TEST_CASE("compression agreement: failover with a compressor the servers decode is refused at "
          "once - summable ones still fail over",
          "[cluster][compress]") {
  auto cfg = test::base_config(1, 1);
  cfg.failover_timeout = std::chrono::seconds(5);
  cfg.min_compress_bytes = 0;
  auto with_default = cfg;
  with_default.compressor = "fp16";
  const auto bad = test::message_of<usage_error>([&] { with_default.validate(); });
  CHECK(has(bad, "BYTEPS_COMPRESSOR"));
  CHECK(has(bad, "failover"));
  cluster c(cfg);
  c.run_workers([&](comm_t& comm, int) {
    std::vector<float> v(100, 1.0f);
    const auto text = test::message_of<usage_error>(
        [&] { comm.push_pull("f", std::span(v), {.compressor = compress::by_name("fp16")}); });
    BPS_EXPECT(has(text, "push_pull of 'f'") && has(text, "BYTEPS_FAILOVER_TIMEOUT_MS"),
               "message: {}", text);
  });
}
