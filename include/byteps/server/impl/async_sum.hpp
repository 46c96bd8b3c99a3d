#pragma once
/// @file
/// The bodies of server/async_sum.hpp's functions that are not templates: inline in header-only
/// mode, compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::server {

void async_sum::check_config(const Config& cfg) {
  if (!cfg.enable_async)
    throw usage_error(
        "server::async_sum needs BYTEPS_ENABLE_ASYNC=1 on every node: without "
        "it workers expect sums, not parameters");
}

outcome async_sum::handle(const request& r) {
  const wire::header& h = r.head;
  const bool offer = h.type == wire::msg::sum_offer;
  if (h.type != wire::msg::push && !(offer && r.failover))
    return outcome::refuse(fmt::format("async mode takes pushes only, not a {} of {}",
                                       wire::msg_name(h.type), r.tensor_name()));
  auto& k = keys_[key_id{h.key, h.part}];
  if (auto bad = check(k, h, r); !bad.empty()) return outcome::refuse(std::move(bad));
  if (offer) return take_offer(k, r);
  const auto w = static_cast<std::size_t>(r.worker);
  const bool rejoined = !k.started[w] && h.round > 0;  // failover: its first push here
  k.started[w] = true;
  const bool recovered = k.hear(r.worker);
  if (!k.seeded) {
    if (r.worker != seeder()) {  // waits for the seed (or an offer)
      if (k.failover || elastic_) k.held[w] = 0;
      return outcome::wait();
    }
    k.seeded = true;
    reduce::accumulate_init(k.master.data(), r.whole().data(), k.count(), k.type);
    if (!k.failover) {  // the seeder and who waited for it
      for (auto& waiting : k.held) waiting.reset();  // elastic notes them: answered now
      return outcome::release(snapshot(k, 0));
    }
    return settle(k, w, 0, false, recovered, slowest(k));
  }
  // A round 0 after the seed, or a re-push the replacement's parameters already hold (or,
  // elastic, one a server asked for again).
  if (h.round == 0 || h.round <= k.pushes[w])
    return settle(k, w, h.round, false, recovered, slowest(k));
  const std::uint64_t slowest_before = slowest(k);
  k.apply(r.worker, h.round, r.whole().data(), rejoined);
  return settle(k, w, h.round, true, recovered, slowest_before);
}

std::string async_sum::check(key& k, const wire::header& h, const request& r) const {
  const auto t = dtype_from_wire(h.dtype);
  const bool offer = h.type == wire::msg::sum_offer;
  const std::uint64_t counts = offer ? wire::applied_counts_bytes(r.num_workers) : 0;
  if (!t) return fmt::format("unknown dtype value {} for {}", h.dtype, r.tensor_name());
  if (offer && ((h.flags & wire::flag_applied) == 0 || r.whole().size() < counts))
    return fmt::format(
        "a sum_offer of {} partition {} without the {} bytes of applied counts "
        "that async mode's offers end with",
        r.tensor_name(), h.part, counts);
  const std::size_t size = r.whole().size() - counts;
  if (auto bad = key_shape::check_frame(h, size, t, r.worker, r.num_workers,
                                        [&] { return r.tensor_name(); });
      !bad.empty())
    return bad;
  if (!k.shaped)
    k.shape(*t, h, size, r.worker, r.num_workers, r.failover);
  else if (!k.same(h, *t, size))
    return k.mismatch(r.tensor_name(), r.worker, h, *t);
  const auto w = static_cast<std::size_t>(r.worker);
  if (!member(w))
    return fmt::format("worker {} pushed {} partition {}, but it is no longer a member of the "
                       "job (it was removed from it)",
                       r.worker, r.tensor_name(), h.part);
  // Elastic: the push a server asked for again (server/handler.hpp, round_redo).
  if (elastic_ && k.started[w] && h.round == k.pushes[w]) return {};
  if (offer)
    return k.started[w] ? fmt::format(
                              "worker {} offered {} partition {} after it pushed it "
                              "here; a worker offers before it pushes",
                              r.worker, r.tensor_name(), h.part)
                        : std::string{};
  // Elastic: a worker that joined the running job starts each key at the round the job is at
  // (its first push of it, which is past 0).
  if (elastic_ && !r.failover && !k.started[w] && h.round > 0) {
    k.pushes[w] = h.round - 1;
    return {};
  }
  // A worker re-joining a replacement (failover) may push any round up to its next one:
  // the round in flight when the old server died, or the next after the answer it offered.
  if (r.failover && !k.started[w] && h.round > 0) {
    if (k.seeded && h.round <= k.pushes[w] + 1) return {};
    return fmt::format(
        "worker {} pushed round {} of {} partition {} as its first push to this "
        "server, but {}; after a failover a worker offers its last answer "
        "before it pushes again",
        r.worker, h.round, r.tensor_name(), h.part,
        k.seeded ? fmt::format("the parameters hold its rounds up to {} only", k.pushes[w])
                 : std::string("no parameters came yet"));
  }
  const std::uint64_t expected = k.started[w] ? k.pushes[w] + 1 : 0;
  if (h.round != expected)
    return fmt::format(
        "worker {} pushed round {} of {} partition {}, but its next round is {}; "
        "in async mode each worker's push_pulls of a tensor count 0, 1, 2, ...",
        r.worker, h.round, r.tensor_name(), h.part, expected);
  return {};
}

outcome async_sum::take_offer(key& k, const request& r) {
  const auto n = static_cast<std::size_t>(r.num_workers);
  const std::byte* params = r.whole().data();
  std::vector<std::uint64_t> counts(n);
  for (std::size_t w = 0; w < n; ++w)
    counts[w] = wire::detail::get_le<std::uint64_t>(params + k.bytes + 8 * w);
  if (counts[static_cast<std::size_t>(r.worker)] != r.head.round)
    return outcome::refuse(fmt::format(
        "worker {}'s sum_offer of {} partition {} is of round {}, but its counts say the "
        "parameters hold {} of its deltas",
        r.worker, r.tensor_name(), r.head.part, r.head.round,
        counts[static_cast<std::size_t>(r.worker)]));
  const std::uint64_t slowest_before = slowest(k);
  k.rebase(params, counts);
  const bool recovered = k.hear(r.worker);
  if (k.recovering() || (!recovered && slowest(k) == slowest_before)) return outcome::taken();
  auto released = release_held(k, snapshot(k, 0));
  if (released.empty()) return outcome::taken();
  return outcome::release_each({}, std::move(released));  // the offer's worker has its answer
}

outcome async_sum::settle(key& k, std::size_t w, std::uint64_t round, bool applied, bool recovered,
                          std::uint64_t slowest_before) {
  // A push asked for again (elastic) is held again while still too far ahead.
  const bool too_far = (applied || elastic_) && staleness_ >= 0 &&
                       k.pushes[w] - slowest(k) > static_cast<std::uint64_t>(staleness_);
  const bool hold = k.recovering() || too_far;
  if (hold) k.held[w] = round;
  const bool frees = !k.recovering() && (recovered || slowest(k) != slowest_before);
  if (hold) {
    if (!frees) return outcome::wait();
    auto released = release_held(k, snapshot(k, 0));
    return released.empty() ? outcome::wait() : outcome::wait_and_release(std::move(released));
  }
  reply now = snapshot(k, round);
  if (!frees) return outcome::answer_now(std::move(now));
  auto released = release_held(k, now);
  if (released.empty()) return outcome::answer_now(std::move(now));
  return outcome::release_each(std::move(now), std::move(released));
}

std::vector<round_redo> async_sum::restart_rounds(const std::vector<bool>& members) {
  // A removed machine's place starts over (a worker may take it again); a machine that joins
  // starts level with the slowest member, and its first push of each key names its round.
  for (auto& [id, k] : keys_) {
    const std::uint64_t level = slowest(k);  // over the members before the change
    for (std::size_t w = 0; w < k.pushes.size(); ++w) {
      const bool was = member(w), is = w < members.size() && members[w];
      if (was == is) continue;
      k.started[w] = false;
      if (is) k.pushes[w] = level;
    }
  }
  members_ = members;
  std::vector<round_redo> redo;
  for (auto& [id, k] : keys_)
    for (std::size_t w = 0; w < k.held.size(); ++w) {
      if (!k.held[w]) continue;
      if (member(w)) redo.push_back({id.key, id.part, *k.held[w], {static_cast<int>(w)}});
      k.held[w].reset();
    }
  return redo;
}

std::vector<held_answer> async_sum::release_held(key& k, const reply& shared) const {
  std::vector<held_answer> released;
  const std::uint64_t slowest = this->slowest(k);
  for (std::size_t u = 0; u < k.held.size(); ++u) {
    if (!k.held[u] || !member(u)) continue;
    if (staleness_ >= 0 && k.pushes[u] - slowest > static_cast<std::uint64_t>(staleness_)) continue;
    reply mine = shared;  // the same bytes, its own round
    mine.round = *k.held[u];
    released.push_back({static_cast<int>(u), std::move(mine)});
    k.held[u].reset();
  }
  return released;
}

reply async_sum::snapshot(const key& k, std::uint64_t round) {
  const std::size_t counts = k.failover ? 8 * k.pushes.size() : 0;
  auto copy = std::make_shared_for_overwrite<std::byte[]>(k.bytes + counts);
  reduce::accumulate_finish(copy.get(), k.master.data(), k.count(), k.type);
  for (std::size_t w = 0; w < counts / 8; ++w)
    wire::detail::put_le<std::uint64_t>(copy.get() + k.bytes + 8 * w, k.pushes[w]);
  reply r{std::span<const std::byte>(copy.get(), k.bytes + counts),
          round,
          k.type,
          k.offset,
          k.tensor_bytes,
          std::shared_ptr<const void>(copy, copy.get())};
  r.applied_counts = counts > 0;
  return r;
}

}  // namespace bps::server
