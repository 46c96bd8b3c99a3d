#pragma once
/// @file
/// The bodies of server/sync_sum.hpp's functions that are not templates: inline in header-only
/// mode, compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::server {

void sync_sum::check_config(const Config& cfg) {
  if (cfg.enable_async)
    throw usage_error(
        "BYTEPS_ENABLE_ASYNC=1, but this server sums synchronously (server::"
        "sync_sum): run Server<T, server::async_sum> (byteps-server does)");
}

outcome sync_sum::handle(const request& r) {
  const wire::header& h = r.head;
  auto [at, fresh] = keys_.try_emplace(key_id{h.key, h.part}, *pool_, r.failover, chunk_, rank_order_);
  auto& k = at->second;
  if (fresh && !members_.empty()) k.restart_round(members_);
  if (r.push.buffer == nullptr) return lent(k, r);
  if (h.type == wire::msg::sum_offer) {
    std::uint32_t contributors = 0;
    if (offers_count_) {
      auto& b = *r.push.buffer;
      if (b.size < wire::contributors_tail_bytes)
        return outcome::refuse(fmt::format("worker {}'s sum_offer of {} partition {} has no "
                                           "contributor count (elastic training)",
                                           r.worker, r.tensor_name(), h.part));
      b.size -= wire::contributors_tail_bytes;
      contributors = wire::read_contributors(
          std::span<const std::byte>(b.data.get() + b.size, wire::contributors_tail_bytes));
    }
    bool completes = false;
    auto problem = k.offer(h, *r.push.buffer, r.worker, r.num_workers, completes, r.tensor_name,
                           contributors);
    if (!problem.empty()) return outcome::refuse(std::move(problem));
    if (!completes) return outcome::taken();
    return finish(k);
  }
  if (r.failover && k.shaped) {
    if (auto previous = k.previous_sum(h.round))
      return outcome::answer_now(sum(k, *previous, h.round));
  }
  auto problem = k.accept(h, *r.push.buffer, r.worker, r.num_workers, r.tensor_name);
  if (!problem.empty()) return outcome::refuse(std::move(problem));
  if (!k.complete()) return outcome::wait();
  return finish(k);
}

outcome sync_sum::lent(key_state& k, const request& r) {
  const wire::header& h = r.head;
  const std::size_t size = r.push.bytes.size();
  // A whole push here on a key that does not hold its pushes yet: a landed push on a key a
  // sum_offer shaped (failover). Between rounds it starts holding them.
  if (k.shaped && !k.streamed() && r.push.first && r.push.complete && k.pushed() == 0)
    k.hold_inputs();
  if (k.shaped && !k.streamed()) {
    // An unstreamed key (its partition is smaller): this push cannot have its shape, which
    // poisons the round. Its first call counts it (and puts its worker among those the
    // round's error goes to); its bytes are never read.
    if (!r.push.first) return outcome::taken();
    auto problem = k.admit(h, size, r.worker, r.num_workers, r.tensor_name);
    if (!problem.empty()) return outcome::refuse(std::move(problem));
    return k.complete() ? finish(k) : outcome::wait();
  }
  if (r.push.first) {
    if (r.failover && k.shaped) {
      if (auto previous = k.previous_sum(h.round))
        return outcome::answer_now(sum(k, *previous, h.round));  // its later calls: taken
    }
    auto problem = k.admit(h, size, r.worker, r.num_workers, r.tensor_name, true);
    if (!problem.empty()) return outcome::refuse(std::move(problem));  // later calls: taken
    k.take_input(r.worker, r.push.ref());
  } else if (!k.is_input(r.worker, r.push.owner.get())) {
    return outcome::taken();
  }
  const auto [from, bytes] = k.arrived(r.worker, r.push.bytes_in, r.push.complete);
  if (k.complete()) {
    if (!k.round_error.empty() || from == 0) return finish(k);  // no piece went out
    outcome o = outcome::piece(piece(k, from, bytes), true);
    k.next_round();
    return o;
  }
  if (bytes == 0) return outcome::wait();
  return outcome::piece(piece(k, from, bytes), false);
}

std::vector<round_redo> sync_sum::restart_rounds(const std::vector<bool>& members) {
  members_ = members;
  std::vector<round_redo> redo;
  for (auto& [id, k] : keys_) {
    auto workers = k.restart_round(members);
    if (!workers.empty()) redo.push_back({id.key, id.part, k.round, std::move(workers)});
  }
  return redo;
}

reply sync_sum::piece(const key_state& k, std::size_t from, std::size_t bytes) {
  return {
      k.sum_buffer().subspan(from, bytes), k.round, k.type, k.offset + from, k.tensor_bytes, {}};
}

reply sync_sum::sum(const key_state& k, std::span<const std::byte> bytes, std::uint64_t round) {
  reply r{bytes, round, k.type, k.offset, k.tensor_bytes, {}};
  r.contributors = k.offered_contributors(round);
  return r;
}

outcome sync_sum::finish(key_state& k) {
  outcome o = k.round_error.empty() ? outcome::release(sum(k, k.finish_round(), k.round))
                                    : outcome::fail_round(k.round_error);
  k.next_round();  // the sum stays in buffer round % 2 until round + 2 begins
  return o;
}

}  // namespace bps::server
