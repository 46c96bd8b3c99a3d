#include <byteps/rendezvous/messages.hpp>

#include <byteps/wire/codec.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <span>
#include <vector>

// The elastic training notice, `membership` (scheduler -> workers and servers): its encoding and
// what its decoder refuses.

TEST_CASE("rendezvous membership round-trips and refuses bad payloads",
          "[wire][rendezvous][elastic]") {
  const bps::rendezvous::membership m{7, {0, 2, 5}, {1, 2, 1}, 4, 1, "disconnected (end of file)",
                                      true};
  const auto bytes = bps::rendezvous::encode(m);
  CHECK(bytes.size() == 8 + 4 + 3 * 4 + 3 * 4 + 4 + 4 + 4 + m.why.size() + 1 + 4 + 8);
  CHECK(bps::rendezvous::decode_membership(bytes) == m);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    CAPTURE(n);
    CHECK_THROWS_AS(bps::rendezvous::decode_membership(std::span<const std::byte>(bytes.data(), n)),
                    bps::wire::decode_error);
  }
  auto longer = bytes;
  longer.push_back(std::byte{0});
  CHECK_THROWS_AS(bps::rendezvous::decode_membership(longer), bps::wire::decode_error);
  auto refused = [](bps::rendezvous::membership bad) {
    CHECK_THROWS_AS(bps::rendezvous::decode_membership(bps::rendezvous::encode(bad)),
                    bps::wire::decode_error);
  };
  auto bad = m;
  bad.members = {0, 2, 2};  // not ascending
  refused(bad);
  bad.members = {-1, 2};
  refused(bad);
  bad = m;
  bad.processes = 3;  // not the sum of the local sizes
  refused(bad);
  bad = m;
  bad.local_sizes = {1, 0, 3};
  refused(bad);
  bad = m;
  bad.removed = -2;
  refused(bad);
  bad = m;
  bad.removed = -1;  // a change that removed nobody
  CHECK(bps::rendezvous::decode_membership(bps::rendezvous::encode(bad)) == bad);
  bad = m;
  bad.lost = false;  // it left
  CHECK(bps::rendezvous::decode_membership(bps::rendezvous::encode(bad)) == bad);
  auto flag = bytes;
  flag[flag.size() - 13] = std::byte{2};  // the lost flag, before joined and boundary
  CHECK_THROWS_AS(bps::rendezvous::decode_membership(flag), bps::wire::decode_error);
  // A join: the machine that joined is a member, and the boundary every member waits at.
  bad = m;
  bad.removed = -1;
  bad.lost = false;
  bad.joined = 5;
  bad.boundary = 41;
  CHECK(bps::rendezvous::decode_membership(bps::rendezvous::encode(bad)) == bad);
  bad.joined = 3;  // not among the members
  refused(bad);
  bad.joined = -2;
  refused(bad);
}
