#include <byteps/rendezvous/one_host.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

// rendezvous::all_on_one_host: the scheduler's judgement, from its nodes' peer addresses, that
// a job's bytes never cross a wire.

namespace rv = bps::rendezvous;

TEST_CASE("host_of_peer takes the port off every form a transport writes", "[rendezvous]") {
  CHECK(rv::host_of_peer("10.0.0.2:41000") == "10.0.0.2");
  CHECK(rv::host_of_peer("::1:41000") == "::1");
  CHECK(rv::host_of_peer("[::1]:41000") == "::1");
  CHECK(rv::host_of_peer("fe80::2:9") == "fe80::2");
  CHECK(rv::host_of_peer("::ffff:10.0.0.2:41000") == "10.0.0.2");
  CHECK(rv::host_of_peer("unknown peer").empty());
  CHECK(rv::host_of_peer(":41000").empty());
}

TEST_CASE("all_on_one_host - one address, or loopback, is one host", "[rendezvous]") {
  using peers = std::vector<std::string>;
  CHECK(rv::all_on_one_host(peers{"127.0.0.1:5000", "127.0.0.1:5001", "127.0.0.1:5002"}));
  CHECK(rv::all_on_one_host(peers{"127.0.0.1:5000", "127.0.1.1:5001", "::1:5002"}));
  CHECK(rv::all_on_one_host(peers{"10.0.0.2:5000", "10.0.0.2:6000"}));
  CHECK(rv::all_on_one_host(peers{"::ffff:10.0.0.2:5000", "10.0.0.2:6000"}));
  // Two machines, or a loopback peer beside a routed one, are not.
  CHECK_FALSE(rv::all_on_one_host(peers{"10.0.0.2:5000", "10.0.0.3:5000"}));
  CHECK_FALSE(rv::all_on_one_host(peers{"127.0.0.1:5000", "10.0.0.2:5000"}));
  // Nothing known is not one host.
  CHECK_FALSE(rv::all_on_one_host(peers{}));
  CHECK_FALSE(rv::all_on_one_host(peers{"127.0.0.1:5000", "unknown peer"}));
}
