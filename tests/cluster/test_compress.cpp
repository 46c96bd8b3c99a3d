// The encode and decode stages: a compressor given in push_pull_options runs once per partition
// before the push and after the pull, and servers sum what workers encoded.

#include <atomic>
#include <byteps/compress/compressor.hpp>
#include <catch2/catch.hpp>
#include <cstring>

#include "cluster.hpp"
#include "values.hpp"

using namespace bps;
using bps::test::cluster;
using bps::test::comm_t;

namespace {

struct codec_counts {
  std::atomic<int> made{0}, encoded{0}, decoded{0}, wrong_sizes{0};
};

// Negates every element on the way out and back: the servers sum negated values, so the result
// is still the exact sum (IEEE rounding is symmetric; integers wrap alike), and a stage that did
// not run shows as a wrong sign.
struct negating_codec {
  static constexpr bool summable = true;  // servers sum the negated values as they are
  explicit negating_codec(codec_counts* c) : c_(c) { ++c_->made; }
  std::string name() const { return "negate"; }
  std::size_t max_encoded_bytes(std::size_t bytes, dtype) const { return bytes; }
  std::size_t encode(std::span<const std::byte> in, dtype t, std::span<std::byte> out) {
    ++c_->encoded;
    flip(in, t, out);
    return in.size();
  }
  void decode(std::span<const std::byte> in, dtype t, std::span<std::byte> out) {
    ++c_->decoded;
    // Called on an I/O thread, where Catch's assertions are not safe: counted, checked later.
    if (in.size() != out.size()) ++c_->wrong_sizes;
    flip(in, t, out);
  }
  static void flip(std::span<const std::byte> in, dtype t, std::span<std::byte> out) {
    std::memcpy(out.data(), in.data(), in.size());
    const std::size_t n = in.size() / dtype_size(t);
    // Sign bit for floating dtypes; two's complement for integers.
    for (std::size_t i = 0; i < n; ++i) {
      std::byte* e = out.data() + i * dtype_size(t);
      switch (t) {
        case dtype::float32:
          *reinterpret_cast<float*>(e) = -*reinterpret_cast<float*>(e);
          break;
        case dtype::float64:
          *reinterpret_cast<double*>(e) = -*reinterpret_cast<double*>(e);
          break;
        case dtype::float16:
        case dtype::bfloat16:
          e[1] ^= std::byte{0x80};
          break;
        case dtype::int8:
          *reinterpret_cast<std::uint8_t*>(e) =
              static_cast<std::uint8_t>(0u - *reinterpret_cast<std::uint8_t*>(e));
          break;
        case dtype::uint8:
          *reinterpret_cast<std::uint8_t*>(e) =
              static_cast<std::uint8_t>(0u - *reinterpret_cast<std::uint8_t*>(e));
          break;
        case dtype::int32:
          *reinterpret_cast<std::uint32_t*>(e) = 0u - *reinterpret_cast<std::uint32_t*>(e);
          break;
        case dtype::int64:
          *reinterpret_cast<std::uint64_t*>(e) = 0ull - *reinterpret_cast<std::uint64_t*>(e);
          break;
      }
    }
  }
  codec_counts* c_;
};

}  // namespace

TEST_CASE(
    "compressor: encode and decode run once per partition and round - exact sums for every dtype",
    "[cluster][compress]") {
  // 512: the servers answer in pieces (cut-through), still decoded once, whole.
  const std::size_t chunk = GENERATE(0u, 512u);
  CAPTURE(chunk);
  auto cfg = test::base_config(2, 2);
  cfg.partition_bytes = 4096;
  cfg.server_chunk_bytes = chunk;
  cfg.min_compress_bytes = 0;  // these tensors are small
  cluster c(cfg);
  constexpr int rounds = 3;
  constexpr std::size_t n = 5000;
  c.run_workers([&](comm_t& comm, int rank) {
    for (dtype t : all_dtypes) {
      codec_counts k;
      auto spec = compress::use<negating_codec>(&k);
      const std::size_t parts = (n * dtype_size(t) + cfg.partition_bytes - 1) / cfg.partition_bytes;
      for (int round = 0; round < rounds; ++round) {
        auto b = test::fill(t, n, rank, round);
        comm.push_pull(fmt::format("negated.{}", dtype_name(t)), b.data(), n, t,
                       {.compressor = spec})
            .wait();
        auto wrong = test::first_wrong(t, b, n, 2, round);
        BPS_EXPECT(wrong == n, "{} round {} rank {}: element {} is not the sum", dtype_name(t),
                   round, rank, wrong);
      }
      // One compressor per partition, plus the one the spec made to learn the name.
      BPS_EXPECT(k.made == static_cast<int>(parts) + 1, "{}: made {} compressors for {} parts",
                 dtype_name(t), k.made.load(), parts);
      BPS_EXPECT(k.encoded == static_cast<int>(parts) * rounds, "{}: encoded {}", dtype_name(t),
                 k.encoded.load());
      BPS_EXPECT(k.decoded == static_cast<int>(parts) * rounds, "{}: decoded {}", dtype_name(t),
                 k.decoded.load());
      BPS_EXPECT(k.wrong_sizes == 0, "{}: {} answers of another size than their partition",
                 dtype_name(t), k.wrong_sizes.load());
    }
  });
}

TEST_CASE("compressor: servers sum the encoded bytes - one worker negating shows it",
          "[cluster][compress]") {
  auto cfg = test::base_config(2, 1);
  cfg.min_compress_bytes = 0;  // a small tensor
  cluster c(cfg);
  c.run_workers([&](comm_t& comm, int rank) {
    codec_counts k;
    std::vector<float> v(100, rank == 0 ? 3.0f : 5.0f);
    // Worker 0 sends -3 and decodes (-3 + 5) = 2 as -2; worker 1 gets 2 as it is.
    push_pull_options o;
    if (rank == 0) o.compressor = compress::use<negating_codec>(&k);
    comm.push_pull("mixed", std::span(v), o).wait();
    const float expected = rank == 0 ? -2.0f : 2.0f;
    for (float x : v) BPS_EXPECT(x == expected, "rank {}: got {}, expected {}", rank, x, expected);
  });
}

TEST_CASE(
    "compressor: a tensor keeps its first compressor - another one is a usage error naming both",
    "[cluster][compress]") {
  auto cfg = test::base_config(1, 1);
  cfg.min_compress_bytes = 0;  // a small tensor
  cluster c(cfg);
  c.run_workers([&](comm_t& comm, int) {
    codec_counts k;
    std::vector<float> v(10, 1.0f);
    comm.push_pull("w", std::span(v), {.compressor = compress::use<negating_codec>(&k)}).wait();
    auto text = test::message_of<usage_error>([&] { comm.push_pull("w", std::span(v)); });
    BPS_EXPECT(text.find("'negate'") != std::string::npos && text.find("none") != std::string::npos,
               "message: {}", text);
    // Identity is no compressor at all: a plain tensor accepts it.
    comm.push_pull("plain", std::span(v)).wait();
    comm.push_pull("plain", std::span(v), {.compressor = compress::use<compress::identity>()})
        .wait();
    BPS_EXPECT(v[0] == 1.0f, "plain: {}", v[0]);
  });
}
