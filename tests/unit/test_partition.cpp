#include <byteps/partition/by_bytes.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <vector>

// partition::by_bytes: BYTEPS_PARTITION_BYTES set (BytePS's split, spread over the servers) and
// unset (auto: more, smaller partitions for large tensors on several servers).

namespace {

bps::Config fixed(std::size_t partition_bytes, int local_size = 1) {
  bps::Config c;
  c.partition_bytes = partition_bytes;
  c.local_size = local_size;
  return c;
}

bps::Config automatic(int servers) {
  bps::Config c;  // partition_bytes 0: auto
  c.num_servers = servers;
  return c;
}

constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;

// Contiguous, in order, each within the bound, all but the last a whole number of pages.
void check_contract(const std::vector<bps::partition_range>& parts, std::size_t bytes,
                    std::size_t bound) {
  std::size_t offset = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    CAPTURE(i);
    CHECK(parts[i].offset == offset);
    CHECK(parts[i].bytes > 0);
    CHECK(parts[i].bytes <= bound);
    if (i + 1 < parts.size()) CHECK(parts[i].bytes % 4096 == 0);
    offset += parts[i].bytes;
  }
  CHECK(offset == bytes);
}

// BytePS's split with one server: the contract, and every partition the bound but the last.
void check_split(const bps::partition::by_bytes& p, std::size_t bytes) {
  CAPTURE(bytes, p.bound());
  const auto parts = p.split(bytes, 4);
  const std::size_t bound = p.bound();
  REQUIRE(parts.size() == (bytes + bound - 1) / bound);
  check_contract(parts, bytes, bound);
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) CHECK(parts[i].bytes == bound);
  const std::size_t rem = bytes % bound;
  CHECK(parts.back().bytes == (rem == 0 ? bound : rem));
}

}  // namespace

TEST_CASE("by_bytes bound rounds up to whole pages - the same for every local size",
          "[policies][partition]") {
  CHECK(bps::partition::by_bytes(fixed(4096000, 1)).bound() == 4096000);
  CHECK(bps::partition::by_bytes(fixed(5000, 1)).bound() == 8192);
  CHECK(bps::partition::by_bytes(fixed(4096, 1)).bound() == 4096);
  CHECK(bps::partition::by_bytes(fixed(4097, 1)).bound() == 8192);
  // Machines with different local sizes must cut a slice into the same partitions.
  CHECK(bps::partition::by_bytes(fixed(4096000, 3)).bound() == 4096000);
  CHECK(bps::partition::by_bytes(fixed(4097, 2)).bound() == 8192);
  CHECK(bps::partition::by_bytes(fixed(4096, 8)).bound() == 4096);
  CHECK(bps::partition::by_bytes(fixed(std::size_t{1} << 31, 1)).bound() == (std::size_t{1} << 31));
  // auto (the default): the cap
  CHECK(bps::partition::by_bytes(bps::Config{}).bound() == bps::Config::auto_partition_cap);
}

TEST_CASE("by_bytes splits contiguously, in order, each part within the bound",
          "[policies][partition]") {
  const bps::partition::by_bytes p(fixed(4096000, 1));
  REQUIRE(p.bound() == 4096000);

  CHECK(p.split(0, 4).empty());

  for (std::size_t whole : {std::size_t{1}, std::size_t{4095}, std::size_t{4096000}})
    CHECK(p.split(whole, 4) == std::vector<bps::partition_range>{{0, whole}});
  {
    const auto parts = p.split(4096001, 1);
    REQUIRE(parts.size() == 2);
    CHECK(parts[0] == bps::partition_range{0, 4096000});
    CHECK(parts[1] == bps::partition_range{4096000, 1});
  }
  {
    const std::size_t bytes = (std::size_t{64} << 20) + 3;  // 67108867
    const auto parts = p.split(bytes, 1);
    // 67108867 = 16 * 4096000 + 1572867
    REQUIRE(parts.size() == 17);
    CHECK(parts[15] == bps::partition_range{15 * std::size_t{4096000}, 4096000});
    CHECK(parts[16] == bps::partition_range{16 * std::size_t{4096000}, 1572867});
  }

  for (std::size_t bytes :
       {std::size_t{1}, std::size_t{4095}, std::size_t{4096}, std::size_t{4096000},
        std::size_t{4096001}, std::size_t{2 * 4096000}, std::size_t{2 * 4096000 + 1},
        (std::size_t{64} << 20) + 3, std::size_t{100} << 20}) {
    check_split(p, bytes);
  }

  const bps::partition::by_bytes p3(fixed(4096000, 3));
  for (std::size_t bytes :
       {std::size_t{1}, std::size_t{4104192}, std::size_t{4104193}, (std::size_t{64} << 20) + 3})
    check_split(p3, bytes);

  const bps::partition::by_bytes small(fixed(5000, 1));
  const auto parts = small.split(20000, 4);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0] == bps::partition_range{0, 8192});
  CHECK(parts[1] == bps::partition_range{8192, 8192});
  CHECK(parts[2] == bps::partition_range{16384, 3616});
}

TEST_CASE("by_bytes is a pure function of config and arguments", "[policies][partition]") {
  const bps::partition::by_bytes a(fixed(5000, 2));
  const bps::partition::by_bytes b(fixed(5000, 2));
  CHECK(a.bound() == 8192);
  CHECK(a.split(123457, 4) == b.split(123457, 4));
  CHECK(a.split(123457, 4) == a.split(123457, 4));
}

TEST_CASE("by_bytes with a fixed size spreads a mid-size tensor over every server",
          "[policies][partition]") {
  bps::Config c = fixed(4096000);
  c.num_servers = 4;
  const bps::partition::by_bytes p(c);
  // 4 MiB: BytePS would make 2 partitions (4096000 + 98304); here 16 of 256 KiB.
  auto parts = p.split(4u << 20, 4);
  REQUIRE(parts.size() == 16);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    CHECK(parts[i].offset == i * (256u << 10));
    CHECK(parts[i].bytes == 256u << 10);
  }
  // Odd sizes: contiguous, page-sized but the last, every part at least 64 KiB but the last.
  const std::size_t odd = (1u << 20) + 12345;
  parts = p.split(odd, 1);
  std::size_t covered = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    CHECK(parts[i].offset == covered);
    if (i + 1 < parts.size()) CHECK(parts[i].bytes % 4096 == 0);
    covered += parts[i].bytes;
  }
  CHECK(covered == odd);
  CHECK(parts.size() == 16);
  // Small tensors stay whole; large ones keep BytePS's bound-sized partitions.
  CHECK(p.split(100u << 10, 4).size() == 1);
  CHECK(p.split(64u << 20, 4).size() == 17);
  CHECK(p.split(64u << 20, 4)[0].bytes == p.bound());
  // One server: exactly BytePS's split.
  c.num_servers = 1;
  CHECK(bps::partition::by_bytes(c).split(4u << 20, 4).size() == 2);
}

TEST_CASE("auto partitions - up to 16 per server for large tensors - none under 1 MiB",
          "[policies][partition]") {
  // 64 MiB on 4 servers: 64 of 1 MiB (BytePS: 17 of 4096000); on 6 servers the floor holds.
  for (int servers : {4, 6}) {
    CAPTURE(servers);
    auto parts = bps::partition::by_bytes(automatic(servers)).split(64 * MiB, 4);
    REQUIRE(parts.size() == 64);
    for (std::size_t i = 0; i < parts.size(); ++i)
      CHECK(parts[i] == bps::partition_range{i * MiB, MiB});
  }
  // 2 servers: 32 of 2 MiB.
  auto parts = bps::partition::by_bytes(automatic(2)).split(64 * MiB, 4);
  REQUIRE(parts.size() == 32);
  CHECK(parts[31] == bps::partition_range{62 * MiB, 2 * MiB});
  // 3 servers, 100 MiB + 12: 48 parts of ceil(M / 48) rounded up to a page; the last shorter.
  const std::size_t odd = 100 * MiB + 12;
  parts = bps::partition::by_bytes(automatic(3)).split(odd, 4);
  REQUIRE(parts.size() == 48);
  CHECK(parts[0].bytes == 2187264);  // ceil(104857612 / 48) = 2184534, up to 534 pages
  CHECK(parts[47] == bps::partition_range{47 * std::size_t{2187264}, odd - 47 * 2187264});
  // One server: 4 MiB makes 4 of 1 MiB (BytePS: 4096000 + 98304); 64 MiB keeps BytePS's 17
  // (16 would be larger).
  parts = bps::partition::by_bytes(automatic(1)).split(4 * MiB, 4);
  REQUIRE(parts.size() == 4);
  CHECK(parts[3] == bps::partition_range{3 * MiB, MiB});
  CHECK(bps::partition::by_bytes(automatic(1)).split(64 * MiB, 4) ==
        bps::partition::by_bytes(fixed(4096000)).split(64 * MiB, 4));
  // 256 MiB on 4 servers: the cap wins (66 of 4096000, the last shorter).
  parts = bps::partition::by_bytes(automatic(4)).split(256 * MiB, 4);
  REQUIRE(parts.size() == 66);
  CHECK(parts[0].bytes == 4096000);
  CHECK(parts[65] == bps::partition_range{65 * std::size_t{4096000}, 256 * MiB - 65 * 4096000});
}

TEST_CASE("auto partitions in shared memory - none under 1 MiB - larger tensors as elsewhere",
          "[policies][partition]") {
  bps::partition::by_bytes apart(automatic(2)), together(automatic(2));
  together.fit({.in_shared_memory = true});
  // Elsewhere, 1 MiB is spread over the 2 servers in 8 of 128 KiB and 256 KiB in 4 of 64 KiB;
  // on one host through shared memory each is one partition.
  CHECK(apart.split(1 * MiB, 4).size() == 8);
  CHECK(apart.split(256 * KiB, 4).size() == 4);
  CHECK(together.split(1 * MiB, 4) == std::vector<bps::partition_range>{{0, MiB}});
  CHECK(together.split(256 * KiB, 4) == std::vector<bps::partition_range>{{0, 256 * KiB}});
  // 4 MiB: 4 of 1 MiB (elsewhere 8 of 512 KiB).
  CHECK(apart.split(4 * MiB, 4).size() == 8);
  const auto four = together.split(4 * MiB, 4);
  REQUIRE(four.size() == 4);
  for (std::size_t i = 0; i < four.size(); ++i)
    CHECK(four[i] == bps::partition_range{i * MiB, MiB});
  check_contract(together.split(3 * MiB + 12, 4), 3 * MiB + 12, together.bound());
  // From 8 MiB on 2 servers the split is the same either way.
  for (std::size_t bytes : {8 * MiB, 64 * MiB, 256 * MiB + 4096}) {
    CAPTURE(bytes);
    CHECK(together.split(bytes, 4) == apart.split(bytes, 4));
  }
  // Fitted back to a job over sockets, the split is the default's again.
  together.fit({.in_shared_memory = false});
  CHECK(together.split(1 * MiB, 4) == apart.split(1 * MiB, 4));
  // A size the user set is kept in shared memory too.
  auto c = fixed(4096000);
  c.num_servers = 2;
  bps::partition::by_bytes set(c), set_together(c);
  set_together.fit({.in_shared_memory = true});
  CHECK(set_together.split(1 * MiB, 4) == set.split(1 * MiB, 4));
  CHECK(set.split(1 * MiB, 4).size() == 8);
}

TEST_CASE("auto partitions keep the contract and never make fewer partitions than BytePS",
          "[policies][partition]") {
  for (int servers : {1, 2, 4, 6}) {
    const bps::partition::by_bytes a(automatic(servers));
    bps::Config f = fixed(4096000);
    f.num_servers = servers;
    const bps::partition::by_bytes b(f);
    CHECK(a.bound() == b.bound());
    for (std::size_t bytes : {std::size_t{1}, 4 * KiB, 100 * KiB, MiB, 4 * MiB + 12, 24 * MiB + 12,
                              64 * MiB, 256 * MiB + 3}) {
      CAPTURE(servers, bytes);
      const auto parts = a.split(bytes, 4);
      check_contract(parts, bytes, a.bound());
      CHECK(parts.size() >= b.split(bytes, 4).size());
      // Below 4 MiB per server, several servers cut as BytePS-with-spread does.
      if (servers > 1 && bytes < 4 * static_cast<std::size_t>(servers) * MiB)
        CHECK(parts == b.split(bytes, 4));
    }
  }
}
