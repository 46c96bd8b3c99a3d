// What an RDMA link refuses from a peer its receiver has not admitted yet (a listener's link
// before the hello), and what it says when it ends in the middle of a large frame: the same as
// TCP's link (docs/reliability.md, Security). Each refusal closes only its link, is logged at
// WARNING naming the peer, and the transports' other links keep carrying exact frames.
#include <cstdio>
#include <regex>
#include <string>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "rdma_pair.hpp"

using namespace bps;
using namespace bps::test;

namespace {

// What this process writes to stderr (where a logger without a sink writes) while it lives.
class stderr_capture {
 public:
  stderr_capture() : file_(std::tmpfile()) {
    if (file_ == nullptr) throw std::runtime_error("tmpfile() failed");
    std::fflush(stderr);
    saved_ = ::dup(2);
    ::dup2(::fileno(file_), 2);
  }
  stderr_capture(const stderr_capture&) = delete;
  stderr_capture& operator=(const stderr_capture&) = delete;
  ~stderr_capture() {
    restore();
    std::fclose(file_);
  }
  std::string text() {
    std::fflush(stderr);
    std::string out;
    std::rewind(file_);
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, file_)) > 0;) out.append(buf, n);
    return out;
  }
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }

 private:
  std::FILE* file_;
  int saved_ = -1;
};

Config warnings_config() {
  Config c;
  c.log = log_level::warning;
  return c;
}

void send_typed(emu_rdma::link& l, std::uint16_t type, std::uint64_t key,
                std::span<const std::byte> payload) {
  wire::header h;
  h.type = static_cast<wire::msg>(type);
  h.key = key;
  l.send(h, payload, {});
}

// Link 1 of `p` is admitted and still carries an exact frame of `size` bytes.
void other_link_works(rdma_pair& p, std::size_t size) {
  const auto other = pattern(9, size);
  send_frame(*p.client[1], 9, other);
  REQUIRE(p.server_rx[1]->wait_messages(1));
  CHECK(p.server_rx[1]->frames()[0].bytes == other);
  CHECK(p.server_rx[1]->closes() == 0);
  CHECK(p.client_rx[1]->closes() == 0);
}

}  // namespace

TEST_CASE("rdma refusals: a transport frame before the hello closes only its link, logged with the peer",
          "[rdma][refusals]") {
  // 100 bytes go as one SEND (frame), 20000 are announced: both are refused before any payload
  // is taken (TCP's message, word for word).
  for (std::size_t size : {100, 20000}) {
    CAPTURE(size);
    auto net = std::make_shared<emu::fabric>();
    stderr_capture log;
    {
      rdma_pair p(emu_options(net), warnings_config());
      p.server_admits = false;
      p.connect_one();  // link 0: not admitted
      p.server_admits = true;
      p.connect_one();  // link 1: admitted
      send_typed(*p.client[0], 0x101, 3, pattern(3, size));
      REQUIRE(p.server_rx[0]->wait_closed());
      CHECK(p.server_rx[0]->reason() == "protocol error: a transport frame (type 0x101) before its hello");
      CHECK(p.server_rx[0]->messages() == 0);
      REQUIRE(p.client_rx[0]->wait_closed());  // the peer is disconnected
      other_link_works(p, size);
    }
    log.restore();
    const auto text = log.text();
    INFO(text);
    CHECK(std::regex_search(text, std::regex("WARNING rdma: dropping connection from "
                                             "127\\.0\\.0\\.1:\\d+: a transport frame \\(type "
                                             "0x101\\) before its hello")));
    CHECK(net->violations().empty());
  }
}

TEST_CASE("rdma refusals: before the hello a node frame still reaches the receiver (its own checks decide)",
          "[rdma][refusals]") {
  auto net = std::make_shared<emu::fabric>();
  rdma_pair p(emu_options(net));
  p.server_admits = false;
  p.connect_one();
  const auto hello_sized = pattern(5, 300), large = pattern(6, 20000);
  send_frame(*p.client[0], 5, hello_sized);
  send_frame(*p.client[0], 6, large);
  REQUIRE(p.server_rx[0]->wait_messages(2));
  CHECK(p.server_rx[0]->frames()[0].bytes == hello_sized);
  CHECK(p.server_rx[0]->frames()[1].bytes == large);
  CHECK(p.server_rx[0]->closes() == 0);
  CHECK(net->violations().empty());
}

TEST_CASE("rdma refusals: a direct frame before the hello closes its link, logged with the peer",
          "[rdma][refusals]") {
  // A receiver that (wrongly) says its place stays before admitting the peer: the sender then
  // writes its second frame `direct`, which the link refuses since nothing may be advertised to
  // a peer that has not said hello.
  auto net = std::make_shared<emu::fabric>();
  stderr_capture log;
  std::vector<std::byte> arena(1 << 16);
  const auto second = pattern(2, 20000);  // outlives the transports, which may still read it
  {
    rdma_pair p(emu_options(net), warnings_config());
    p.server_net.register_memory(arena);
    p.server_arena = &arena;
    p.server_stays = true;
    p.server_admits = false;
    p.connect_one();  // link 0
    p.server_arena = nullptr;
    p.server_stays = false;
    p.server_admits = true;
    p.connect_one();  // link 1
    const auto first = pattern(1, 20000);
    send_frame(*p.client[0], 1, first);
    REQUIRE(p.server_rx[0]->wait_messages(1));  // announced, granted in place, delivered
    CHECK(p.server_rx[0]->frames()[0].bytes == first);
    send_frame(*p.client[0], 1, second);
    REQUIRE(p.server_rx[0]->wait_closed());
    CHECK(p.server_rx[0]->reason() == "protocol error: an RDMA direct message before its hello");
    CHECK(p.server_rx[0]->messages() == 1);
    CHECK(p.client_net.counters().cached == 1);
    CHECK(p.client_net.counters().announced == 1);
    REQUIRE(p.client_rx[0]->wait_closed());
    other_link_works(p, 20000);
  }
  log.restore();
  const auto text = log.text();
  INFO(text);
  CHECK(std::regex_search(text, std::regex("WARNING rdma: dropping connection from "
                                           "127\\.0\\.0\\.1:\\d+: an RDMA direct message before "
                                           "its hello")));
  CHECK(net->violations().empty());
}

TEST_CASE("rdma refusals: a link cut in the middle of a large frame says how many of its bytes arrived",
          "[rdma][refusals]") {
  // 20000 unregistered bytes go through 8 KiB staging windows; the sender's end disconnects
  // after its announce and two writes, so the receiver has 8192 or 16384 of them.
  auto net = std::make_shared<emu::fabric>();
  stderr_capture log;
  std::string reason;
  const auto cut = pattern(4, 20000);  // outlives the transports, which may still read it
  {
    rdma_pair p(emu_options(net), warnings_config());
    p.connect_one();
    p.connect_one();
    net->disconnect_after({p.port, emu::side::active, 0}, 3);
    send_frame(*p.client[0], 4, cut);
    REQUIRE(p.server_rx[0]->wait_closed());
    reason = p.server_rx[0]->reason();
    CHECK(p.server_rx[0]->messages() == 0);
    REQUIRE(p.client_rx[0]->wait_closed());
    other_link_works(p, 20000);
  }
  log.restore();
  std::smatch m;
  REQUIRE(std::regex_match(
      reason, m,
      std::regex("connection (closed by|to) 127\\.0\\.0\\.1:\\d+.* in the middle of a push frame "
                 "\\((\\d+) of its 20000 payload bytes\\)")));
  const auto arrived = std::stoul(m[2].str());
  CHECK((arrived == 8192 || arrived == 16384));
  const auto text = log.text();
  INFO(text);
  CHECK(text.find("WARNING rdma: link to 127.0.0.1:") != std::string::npos);
  CHECK(text.find(fmt::format("in the middle of a push frame ({} of its 20000 payload bytes)",
                              arrived)) != std::string::npos);
  CHECK(net->violations().empty());
}
