#pragma once
/// @file
/// The joining of `worker::node` (worker/node.hpp): the rendezvous and its welcome, the
/// machine's local ranks, and a link to every server, each in the table before its hello.
/// Included at the end of worker/node.hpp.

#include <fmt/core.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "byteps/worker/node.hpp"

namespace bps::worker {

// A worker that joined a running elastic job: the scheduler sends its membership and the state
// of the member chosen to send it right after the welcome. Its tensors start at the rounds the
// servers are at.
template <class T, class L, class P, class S>
void node<T, L, P, S>::take_job_state() {
  const auto f = control_.expect(wire::msg::join_state, clock::now() + cfg_.op_timeout,
                                 "the job's state for this joining worker");
  rendezvous::membership m;
  job_state s;
  try {
    wire::byte_reader r(f.payload);
    const auto bytes = r.get<std::uint32_t>();
    m = rendezvous::decode_membership(r.get_span(bytes));
    s = decode_job_state(r.get_span(r.remaining()));
  } catch (const wire::decode_error& e) {
    throw communicator_error(
        fmt::format("a malformed job state from the scheduler {}: {}", control_.scheduler(),
                    e.what()));
  }
  log_.info("joined the running job at step boundary {} (membership epoch {}): {} tensors, {} "
            "registered state tensor(s), {} bytes of the trainer's own",
            s.boundaries, m.epoch, s.rounds.size(), s.tensors.size(), s.extra.size());
  {
    std::lock_guard lock(state_.mu);
    for (const auto& [key, round] : s.rounds) state_.ops().start_at(key, round);
    barriers_ = s.barriers;
  }
  membership_->joined(std::move(m), std::move(s));
}

template <class T, class L, class P, class S>
void node<T, L, P, S>::join() {
  cfg_.validate();
  auto hello = rendezvous::hello::from(cfg_, role::worker);
  if constexpr (transport::SharesMemory<T>) hello.shares_memory = transport_.shares_memory();
  auto welcome = control_.join(hello);
  state_.machine = welcome.rank;
  num_workers_ = welcome.num_workers;
  global_rank_ = welcome.global_rank;
  state_.global_size = welcome.global_size;
  job_id_ = welcome.job_id;
  slices_ = welcome.slices;
  {
    std::lock_guard lock(state_.mu);
    state_.dispatcher.fit({.in_shared_memory = welcome.in_shared_memory});
  }
  log_.rename(local_.local_size() > 1
                  ? fmt::format("worker {}.{}", state_.machine, local_.local_rank())
                  : fmt::format("worker {}", state_.machine));
  trace_.name_node(global_rank_, log_.who(), state_.machine);
  if (L::is_identity && welcome.slices > 1)
    throw usage_error(fmt::format(
        "this job runs {} local ranks on some machine, so every machine must run a local "
        "collective (bps::local::host) to cut tensors into the same slices; this worker uses "
        "bps::local::none",
        welcome.slices));
  // The machine's local ranks meet right after the welcome, before the links to the servers
  // (which fail once another local rank died): a segment is unlinked when every local rank
  // mapped it, so a local rank that dies before its first push_pull leaves nothing behind.
  // Attached after the links, a survivor failing on its way here left the dead one's control
  // segment in /dev/shm.
  const local::cluster machine{state_.machine,     num_workers_,   global_rank_,
                               state_.global_size, welcome.slices, welcome.job_id};
  if constexpr (transport::SharesMemory<T> && requires { local_.share_segments(true); })
    local_.share_segments(transport_.shares_memory());
  local_.attach(machine);
  control_.on_failure([this](const std::string& why) {
    std::lock_guard lock(state_.mu);
    state_.die_locked(why);
  });
  if (cfg_.failover()) {
    failover_hooks<link_ptr> hooks{
        .connect =
            [this](const rendezvous::address& where, int server, std::uint64_t generation,
                   std::function<bool()> gone) {
              return connect_link(
                  where, server, generation, [](const link_ptr&) {}, gone);
            },
        .dispatch_locked = [this] { dispatch_locked(); },
    };
    failover_ = std::make_unique<failover<state_type>>(state_, answers_, std::move(hooks));
    answers_.keep_with(failover_.get());
  }
  try {
    for (std::size_t i = 0; i < welcome.servers.size(); ++i) {
      const int server = static_cast<int>(i);
      // In the table before its link starts: a link whose hello went out reports its close,
      // which looks it up there. A retry (the server closed a connection before its
      // challenge) puts its fresh link in the same place.
      auto adopt = [&, added = false](const link_ptr& link) mutable {
        std::lock_guard lock(state_.mu);
        if (!added) {
          server_slot<typename T::link> s;
          s.address = fmt::format("{}:{}", welcome.servers[i].host, welcome.servers[i].port);
          s.link = link;
          state_.links.add(std::move(s));
          added = true;
        }
        state_.links[server].link = link;
      };
      // The hello waits for the server's challenge outside the mutex (as failover's does), so
      // a failure the scheduler reports meanwhile closes the links at once instead of waiting
      // for the hello timeout.
      if (!connect_link(welcome.servers[i], server, 0, adopt, [this] {
            std::lock_guard lock(state_.mu);
            return state_.life.gone();
          }))
        throw communicator_error(fmt::format("gave up connecting to server {}", server));
    }
  } catch (const communicator_error& e) {
    std::lock_guard lock(state_.mu);
    // The scheduler's word on why the job failed says more than the link that broke for it.
    if (const auto why = state_.life.failure(); !why.empty())
      throw communicator_error(
          fmt::format("{} (while connecting to the servers: {})", why, e.what()));
    throw;
  }
  ops().stats().servers(state_.links.size());
  if (failover_) failover_->listen(control_);
  if (cfg_.elastic()) {
    membership_ = std::make_unique<membership<state_type>>(
        state_, cfg_, global_rank_, state_.global_size, cfg_.local_rank, registry_, [this] {
          job_state s;  // under the worker's mutex
          s.barriers = barriers_;
          state_.ops().for_each_tensor(
              [&](std::uint64_t key, const tensor& t) { s.rounds.emplace_back(key, t.round); });
          return s;
        });
    if (welcome.epoch != 0) take_job_state();
    membership_->listen(control_);
  }
  if constexpr (!L::is_identity) stage_.start(machine);
  log_.info("joined: rank {} of {} workers on {} machines, {} servers", global_rank_,
            state_.global_size, num_workers_, state_.links.size());
}

}  // namespace bps::worker
