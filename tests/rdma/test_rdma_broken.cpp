// The real transport over a deliberately broken verbs policy. Each break is one a transport
// could make: its lkey advertised as the rkey, its slab registered for remote write without
// local write, a send buffer written again before its completion was reaped, its slab
// deregistered when the link closes rather than once its work drained. The emulation
// must catch each with its named error (before it was strict it let each of them pass), and
// the unbroken policy must move exact bytes with no violation.
#include <byteps/transport/rdma/basic_rdma.hpp>
#include <catch2/catch.hpp>

#include <utility>

#include "emulated_state.hpp"
#include "rdma_pair.hpp"

using namespace bps;
using namespace bps::test;

namespace {

enum class breakage {
  none,
  lkey_as_rkey,
  slab_without_local_write,
  reuse_send_buffer,
  dereg_slab_at_close
};

// emulated_verbs with one call broken as a transport might break it.
class broken_verbs : public emu::emulated_verbs {
 public:
  struct options : emu::emulated_verbs::options {
    breakage broken = breakage::none;
  };
  explicit broken_verbs(const options& o) : emulated_verbs(o), broken_(o.broken) {}

  std::uint32_t rkey(mr* m) {
    return broken_ == breakage::lkey_as_rkey ? lkey(m) : emulated_verbs::rkey(m);
  }
  mr* reg_mr(device* d, std::span<std::byte> memory, unsigned access) {
    if (broken_ == breakage::slab_without_local_write) access &= ~transport::verbs::local_write;
    auto* m = emulated_verbs::reg_mr(d, memory, access);
    last_region_ = m;
    return m;
  }
  void disconnect(cm_id* id) {
    emulated_verbs::disconnect(id);
    if (broken_ == breakage::dereg_slab_at_close && last_region_) {
      // As a transport that frees its slab at close, with its receives still posted there.
      // Refused (EBUSY), so the region stays for the transport's own release later.
      auto* m = std::exchange(last_region_, nullptr);
      emulated_verbs::dereg_mr(m);
    }
  }
  void post_send(cm_id* id, const transport::verbs::send_wr& wr) {
    emulated_verbs::post_send(id, wr);
    if (broken_ == breakage::reuse_send_buffer && wr.local.length > 0) {
      // As a transport that writes its next message into a slot still in flight. (Under the
      // fabric's lock, so that ThreadSanitizer sees the NIC's read ordered with it.)
      std::lock_guard lock(net().impl().mu);
      wr.local.addr[wr.local.length - 1] ^= std::byte{0xff};
    }
  }

 private:
  breakage broken_;
  mr* last_region_ = nullptr;  // the progress thread's: the last link's slab
};
static_assert(RdmaVerbs<broken_verbs>);
using broken_rdma = transport::basic_rdma<broken_verbs>;

// Sends one push of `bytes` over a fresh pair of transports broken by `b`; the first violation
// the fabric recorded within 5 s ("" if none), and the bytes that arrived (if any).
std::pair<std::string, std::vector<std::byte>> send_once(breakage b, std::size_t bytes) {
  auto net = std::make_shared<emu::fabric>();
  // The NIC reads a send 100 ms after its post, so a write the broken transport makes just
  // after posting comes first however the threads are scheduled (with the default 0-200 us,
  // a preempted writer let the NIC read and complete it unchanged: no violation to see).
  if (b == breakage::reuse_send_buffer) net->set_timing({100ms, 100ms, 1});
  broken_rdma::options o;
  o.verbs.net = net;
  o.verbs.broken = b;
  o.rx_depth = 8;
  o.start_depth = 4;
  o.slot_bytes = 512;
  o.staging_bytes = 8192;
  auto server_rx = std::make_shared<recorder>();
  std::mutex mu;
  std::vector<std::shared_ptr<broken_rdma::link>> accepted;
  const auto payload = pattern(1, bytes);
  std::string violation;
  std::vector<std::byte> arrived;
  {
    broken_rdma server(quiet_config(), o);
    broken_rdma client(quiet_config(), o);
    const auto port = server.listen("127.0.0.1", 0, [&](std::shared_ptr<broken_rdma::link> l) {
      l->start(server_rx);
      std::lock_guard lock(mu);
      accepted.push_back(std::move(l));
    });
    try {
      auto l = client.connect("127.0.0.1", port, 5s);
      l->start(std::make_shared<recorder>());
      wire::header h;
      h.type = wire::msg::push;
      h.key = 1;
      l->send(h, payload, {});
    } catch (const std::exception&) {
      // A broken registration can fail the connect itself; the violation says why.
    }
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (net->violations().empty() && server_rx->messages() == 0 &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(1ms);
    if (server_rx->messages() > 0) arrived = server_rx->frames().front().bytes;
    client.stop();
    server.stop();
  }
  const auto v = net->violations();
  if (!v.empty()) violation = v.front();
  if (b == breakage::none) CHECK(arrived == payload);
  return {violation, arrived};
}

}  // namespace

TEST_CASE("rdma broken transport: unbroken, a staged and an inline frame arrive exact", "[rdma][strict]") {
  CHECK(send_once(breakage::none, 20000).first.empty());
  CHECK(send_once(breakage::none, 100).first.empty());
}

TEST_CASE("rdma broken transport: its lkey advertised as the rkey", "[rdma][strict]") {
  CHECK_THAT(send_once(breakage::lkey_as_rkey, 20000).first,
             Catch::Contains("a WRITE WITH IMMEDIATE with rkey") &&
                 Catch::Contains("which names no registered region (it is an lkey"));
}

TEST_CASE("rdma broken transport: its slab registered for remote write without local write", "[rdma][strict]") {
  CHECK_THAT(send_once(breakage::slab_without_local_write, 100).first,
             Catch::Contains("with remote write but without local write: Invalid argument (EINVAL)"));
}

TEST_CASE("rdma broken transport: a send buffer written again before its completion was reaped", "[rdma][strict]") {
  CHECK_THAT(send_once(breakage::reuse_send_buffer, 100).first,
             Catch::Contains("changed between ibv_post_send and"));
}

TEST_CASE("rdma broken transport: its slab deregistered at close, with its receives posted", "[rdma][strict]") {
  CHECK_THAT(send_once(breakage::dereg_slab_at_close, 100).first,
             Catch::Contains("ibv_dereg_mr of the") &&
                 Catch::Contains("still using it: Device or resource busy (EBUSY)"));
}
