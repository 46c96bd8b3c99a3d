#pragma once
// A node made by hand for tests that need one to misbehave at the protocol level: it speaks to
// the scheduler frame by frame instead of through rendezvous::client.
#include <algorithm>
#include <byteps/bodies.hpp>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace bps::test {

// Says a worker's hello to the scheduler by hand on `link`, read by `inbox`: takes the
// scheduler's challenge and proves the job's token for it, as a worker does.
template <class Link>
inline void say_hello(Link& link, rendezvous::inbox& inbox, const Config& cfg) {
  std::string why;
  auto challenge = inbox.take({wire::msg::challenge},
                              std::chrono::steady_clock::now() + std::chrono::seconds(10), why);
  if (!challenge) throw std::runtime_error("a hand-made worker: no challenge: " + why);
  rendezvous::nonce n{};
  std::copy(challenge->payload.begin(), challenge->payload.end(), n.begin());
  // The transport reads the payload after send returns: it lives until on_sent.
  auto hello = std::make_shared<std::vector<std::byte>>(
      rendezvous::encode_proved(rendezvous::hello::from(cfg, role::worker), cfg.job_token, n));
  wire::header h;
  h.type = wire::msg::hello;
  link.send(h, *hello, [hello] {});
}

}  // namespace bps::test
