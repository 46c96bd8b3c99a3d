// libFuzzer target: a real summation server (`bps::Server<>` with its default handler) driven
// through sequences of frames on several connections, over an in-process transport
// (in_process_transport.hpp): the same entry points a TCP link calls, with no sockets and no
// I/O threads. What it exercises: the hello gate and the challenge-response, the session's
// state machine (frames before peer_hello, duplicate and replayed hellos, wrong proofs, wrong
// sizes, unknown types, transport frames), declares against the name limits, pushes and sum
// offers of every dtype and shape, byes and closes in any order.
//
// The input (script.hpp): a setup byte, then operations, each an opcode byte and its operands.
// After each operation the engine thread is drained, so every input runs the same way.
//
// What must hold, else it aborts:
// - a connection that has not proved the token changes nothing: no frame is sent anywhere
//   (bar its challenge), the name table is as it was, and the server is no more dead;
// - at most BYTEPS_MAX_TENSORS names of at most BYTEPS_MAX_NAME_BYTES are held; every new
//   connection is challenged, and one past BYTEPS_MAX_PENDING_CONNECTIONS strangers closes the
//   stranger that waited longest, so no more than that many ever wait;
// - the server sends only challenges, pull responses (alone or in well-formed answer batches)
//   and errors, and only the challenge to a connection that never proved itself; every error
//   has a message;
// - a receiver throws only byteps's own error types (in_process_transport.hpp);
// - then two workers that prove the token still get the exact sum of a fresh round, or, when
//   an authenticated worker broke the job, the error that names why; a job that never admitted
//   a fuzzed connection is never broken;
// - the job ends normally when the scheduler says so.
#include <byteps/compress/registry.hpp>
#include <byteps/server/node.hpp>
#include <byteps/wire/batch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "in_process_transport.hpp"
#include "script.hpp"

namespace bps::testing {
// The server's test accessor (server/node.hpp befriends it; the cluster tests define their own in
// tests/cluster/server_access.hpp, another program): what the fuzzer checks inside a server.
struct server_access {
  template <class S>
  static auto& transport(S& s) {
    return s.transport_;
  }
  template <class S>
  static const server::tensor_names& names(S& s) {
    return s.names_;
  }
  template <class S>
  static std::string dead_reason(S& s) {
    return s.dead_reason();
  }
  /// Waits until each engine thread ran everything posted to it so far.
  template <class S>
  static void drain(S& s) {
    for (auto& e : s.engines_) {
      std::promise<void> done;
      e->post([&done] { done.set_value(); });
      done.get_future().wait();
    }
  }
};
}  // namespace bps::testing

namespace {

using namespace bps;
using fuzzing::broken;
// The server itself (server::node), not its public face, so the accessor reaches inside.
using server_t = server::node<fuzzing::in_process, server::decoding<server::sync_sum>>;
using access = testing::server_access;

// The fuzzer's end of one connection.
struct connection {
  std::shared_ptr<fuzzing::in_process_link> link;
  std::optional<rendezvous::nonce> challenge;  // from the server's first frame
  std::uint32_t machine = 0;                   // the machine its last good-looking hello named
  bool proved = false;                         // it was admitted at some point
  std::vector<fuzzing::sent_frame> received;
};

std::string name_of(wire::msg m) {
  return std::string(wire::msg_name(m));
}

Config job_config(std::uint8_t setup) {
  Config c;
  c.num_workers = 2;
  c.num_servers = 1;
  c.scheduler_host = "scheduler";
  c.node_host = "127.0.0.1";
  c.job_token = (setup & 4) != 0 ? "" : "the job's token";
  c.server_engine_threads = 1;
  c.server_chunk_bytes = (setup & 2) != 0 ? 64 : 0;  // cut-through from 128-byte pushes
  c.failover_timeout = std::chrono::milliseconds((setup & 1) != 0 ? 1000 : 0);
  c.max_tensors = fuzzing::max_tensors;
  c.max_name_bytes = fuzzing::max_name_bytes;
  c.max_pending_connections = 3;  // a fourth silent connection closes the first
  c.log = log_level::off;
  c.server_log_interval = std::chrono::milliseconds(0);
  // Nothing may fire on a clock during one input: the fuzzer is its only source of events.
  c.hello_timeout = std::chrono::milliseconds(600000);
  c.heartbeat_interval = std::chrono::milliseconds(600000);
  c.heartbeat_timeout = std::chrono::milliseconds(1200000);
  c.stall_warning = std::chrono::milliseconds(600000);
  return c;
}

class harness {
 public:
  explicit harness(const Config& cfg)
      : cfg_(cfg), server_(cfg, fuzzing::in_process::options::from(cfg), compress::registry{}) {}

  // One operation of the script; checks what must hold after it.
  void run(fuzzing::operation op) {
    connection* c = op.conn < conns_.size() ? &conns_[op.conn] : nullptr;
    if (op.kind == fuzzing::op::open) {
      if (conns_.size() >= fuzzing::max_connections) return;
      // BYTEPS_MAX_PENDING_CONNECTIONS: past it, the stranger that waited longest is closed,
      // and the newcomer challenged as any other.
      std::vector<std::size_t> waiting;
      for (std::size_t i = 0; i < conns_.size(); ++i)
        if (conns_[i].link->open() && !admitted(conns_[i])) waiting.push_back(i);
      auto& fresh = conns_[open("10.0.0." + std::to_string(conns_.size() + 1) + ":5000")];
      if (!fresh.link->open() || fresh.received.empty())
        broken("a new connection was closed unchallenged");
      const bool full = waiting.size() >= static_cast<std::size_t>(cfg_.max_pending_connections);
      if (full && conns_[waiting.front()].link->open())
        broken("the pending-connection limit was not kept: " + std::to_string(waiting.size()) +
               " connections waited for their hello, and the oldest was not closed");
      return;
    }
    if (c == nullptr) return;
    const bool stranger = !admitted(*c);
    const auto names_before = names();
    const auto dead_before = access::dead_reason(server_);
    const std::size_t sent_before = sent_;
    // The fuzzed workers keep off the key that the final check sums.
    if (!stranger && op.head.key == fuzzing::check_key) op.head.key = fuzzing::keys[0];
    if (op.kind == fuzzing::op::close) {
      c->link->peer_closes();
    } else {
      if (op.kind == fuzzing::op::hello) {
        op.payload = proof_for(*c, op);
        c->machine = op.head.sender;
      }
      if (op.own_sender) op.head.sender = c->machine;
      c->link->deliver(op.head, op.payload);
    }
    settle();
    if (admitted(*c)) c->proved = true;
    if (stranger && !c->proved) {
      if (sent_ != sent_before)
        broken("a connection that never proved the token made the server send");
      if (names() != names_before)
        broken("a connection that never proved the token changed the names");
      if (access::dead_reason(server_) != dead_before)
        broken("a connection that never proved the token broke the job");
    }
  }

  // Two workers that prove the token sum a fresh round of the check key; then the job ends.
  void finish() {
    // Strangers still waiting would hold the pending places the checkers need.
    for (auto& c : conns_)
      if (!c.proved) c.link->peer_closes();
    settle();
    const bool anyone_proved =
        std::any_of(conns_.begin(), conns_.end(), [](auto& c) { return c.proved; });
    const auto dead = access::dead_reason(server_);
    if (!anyone_proved && !dead.empty()) broken("a job that admitted nobody broke: " + dead);
    std::vector<std::size_t> checkers;
    for (std::uint32_t m = 0; m < 2; ++m) {
      checkers.push_back(open("10.0.1." + std::to_string(m) + ":6000"));
      auto& c = conns_.back();
      fuzzing::operation hi = fuzzing::hello_for(m, fuzzing::check_local_rank);
      hi.payload = proof_for(c, hi);
      c.link->deliver(hi.head, hi.payload);
      settle();
      if (!admitted(c)) broken("a worker with the right proof was refused");
      c.proved = true;
    }
    for (std::uint32_t m = 0; m < 2; ++m) {
      const auto values = fuzzing::check_values(m);
      conns_[checkers[m]].link->deliver(fuzzing::check_push(m), std::as_bytes(std::span(values)));
      settle();
    }
    const auto sum = fuzzing::check_sum();
    for (auto i : checkers) {
      const auto& got = conns_[i].received;
      if (got.size() != 2)
        broken("a checking worker got " + std::to_string(got.size()) + " frames, not 2");
      const auto& answer = got[1];
      if (dead.empty()) {
        if (answer.header.type != wire::msg::pull_response ||
            answer.header.key != fuzzing::check_key || answer.header.round != 0 ||
            answer.payload.size() != sizeof(sum) ||
            std::memcmp(answer.payload.data(), sum.data(), sizeof(sum)) != 0)
          broken("the check round's answer is not the exact sum: " + name_of(answer.header.type) +
                 " " + answer.text());
      } else if (answer.header.type != wire::msg::error ||
                 (answer.header.flags & wire::flag_fatal) == 0 || answer.text() != dead) {
        broken("a broken job answered the check round with something else than why it broke");
      }
    }
    // The checkers leave; the others' connections close; the scheduler ends the job.
    for (auto i : checkers) {
      wire::header bye;
      bye.type = wire::msg::bye;
      conns_[i].link->deliver(bye, {});
    }
    for (auto& c : conns_) c.link->peer_closes();
    settle();
    access::transport(server_).end_job();
    try {
      server_.run();
    } catch (const std::exception& e) {
      broken(std::string("the job did not end normally: ") + e.what());
    }
  }

 private:
  std::size_t open(const std::string& peer) {
    conns_.push_back(
        connection{access::transport(server_).accept(peer), std::nullopt, 0, false, {}});
    settle();
    return conns_.size() - 1;
  }

  static bool admitted(const connection& c) {
    return c.link->peer_admitted();
  }

  // The proof that `op` asks for on `c`: the right one, or one of the wrong kinds (script.hpp).
  std::vector<std::byte> proof_for(const connection& c, const fuzzing::operation& op) {
    rendezvous::nonce n = c.challenge.value_or(rendezvous::nonce{});
    if (op.proof == fuzzing::proof_kind::replayed) {
      for (const auto& other : conns_)
        if (&other != &c && other.challenge) n = *other.challenge;
    }
    const std::string token =
        op.proof == fuzzing::proof_kind::wrong_token ? "another job's token" : cfg_.job_token;
    const auto machine =
        op.head.sender ^ (op.proof == fuzzing::proof_kind::other_machine ? 1u : 0u);
    auto p = rendezvous::peer_hello_proof(token, n, machine, op.head.part);
    std::vector<std::byte> out(p.begin(), p.end());
    if (op.proof == fuzzing::proof_kind::flipped) out[op.head.round % out.size()] ^= std::byte{1};
    return out;
  }

  // Carries out closes, drains the engine, and checks every frame the server sent.
  void settle() {
    for (auto& c : conns_) c.link->settle();
    // Only a streamed push (cut-through) and a failure (Server::fail) post work to the engine
    // thread; every other frame is handled on the link's thread, here. Waiting for the engine
    // costs a thread switch, so it is done only then.
    auto dead = access::dead_reason(server_);
    if (cfg_.server_chunk_bytes > 0 || dead != drained_dead_) {
      access::drain(server_);
      drained_dead_ = std::move(dead);
    }
    for (auto& c : conns_) {
      for (auto& f : c.link->take_sent()) {
        ++sent_;
        check_sent(c, f);
        c.received.push_back(std::move(f));
      }
    }
    const auto held = names();
    std::size_t declared = 0;
    for (std::size_t k = 0; k < held.size(); ++k) {
      if (held[k].empty()) continue;
      ++declared;
      if (held[k].size() > cfg_.max_name_bytes) broken("a name over BYTEPS_MAX_NAME_BYTES is held");
      if (fuzzing::keys[k] == fuzzing::check_key)
        broken("the check key was declared by a stranger");
    }
    if (declared > cfg_.max_tensors) broken("more names than BYTEPS_MAX_TENSORS are held");
  }

  void check_sent(connection& c, const fuzzing::sent_frame& f) {
    if (f.header.type == wire::msg::challenge) {
      if (!c.received.empty() || f.payload.size() != rendezvous::nonce_bytes)
        broken("a challenge that is not a connection's first frame, or not a nonce");
      rendezvous::nonce n{};
      std::memcpy(n.data(), f.payload.data(), n.size());
      c.challenge = n;
      return;
    }
    if (!c.proved && !admitted(c))
      broken("a connection that never proved the token got " + name_of(f.header.type));
    if (f.header.type == wire::msg::error) {
      if (f.payload.empty()) broken("an error without a message");
      return;
    }
    if (f.header.type == wire::msg::answer_batch) {  // tensor fusion: well-formed answers
      try {
        (void)wire::split_batch(f.header, f.payload);
      } catch (const wire::decode_error& e) {
        broken(std::string("the server sent a malformed answer_batch: ") + e.what());
      }
      return;
    }
    if (f.header.type != wire::msg::pull_response)
      broken("the server sent a " + name_of(f.header.type));
  }

  // Each fuzzed key's name, "" while undeclared.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    const auto& table = access::names(server_);
    for (auto k : fuzzing::keys) {
      const auto quoted = table.quoted(k);
      out.push_back(quoted.starts_with("'") ? table.plain(k) : std::string());
    }
    return out;
  }

  Config cfg_;
  server_t server_;
  std::vector<connection> conns_;
  std::size_t sent_ = 0;      // frames the server sent, in all
  std::string drained_dead_;  // the failure the engine was last drained after
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  fuzzing::script in(std::span(data, size));
  harness h(job_config(in.setup()));
  while (auto op = in.next()) h.run(*op);
  h.finish();
  return 0;
}
