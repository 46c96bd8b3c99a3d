#pragma once
/// @file
/// The bodies of server/key_state.hpp's functions that are not templates: inline in header-only
/// mode, compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::server {

void key_state::next_round() {
  pushed_ = 0;
  pushed_without_data_ = 0;
  std::fill(pushed_by_.begin(), pushed_by_.end(), false);
  previous_valid_ = round_error.empty() && shaped;
  round_error.clear();
  whole_.next_round(members_);
  lent_.next_round();
  offered_[(round + 1) % 2] = 0;  // the next round is summed here
  ++round;
}

std::vector<int> key_state::restart_round(const std::vector<bool>& members) {
  members_ = members;
  if (!shaped) return {};  // the first push shapes the key with these members
  fit_members(pushed_by_.size());
  std::vector<int> redo;
  for (std::size_t w = 0; w < pushed_by_.size(); ++w)
    if (pushed_by_[w] && members_[w]) redo.push_back(static_cast<int>(w));
  pushed_ = 0;
  pushed_without_data_ = 0;
  std::fill(pushed_by_.begin(), pushed_by_.end(), false);
  round_error.clear();
  whole_.next_round(members_);
  lent_.next_round();
  return redo;
}

void key_state::init_shape(const wire::header& h, dtype t, std::size_t size, int worker,
                           int num_workers, bool hold) {
  capture(h, t, size, worker);
  pushed_by_.assign(static_cast<std::size_t>(num_workers), false);
  fit_members(static_cast<std::size_t>(num_workers));
  whole_.shape(type, count(), num_workers);
  whole_.next_round(members_);  // rank order starts at the first member
  // A streamed key's rounds may still come whole (a handler that wraps sync_sum without
  // cut_through gets whole pushes), and then go through whole_ as any key's.
  if (hold || lent_.streams(size)) lent_.hold(num_workers);
  // From the pool, so that on RDMA they are registered and answers go out without staging.
  if (lent_.holds() || whole_.accumulates_wide())
    for (auto& o : out_) o = pool_->take(bytes);
}

void key_state::fit_members(std::size_t workers) {
  if (members_.empty()) members_.assign(workers, true);
  members_.resize(workers, false);
  member_count_ = static_cast<int>(std::count(members_.begin(), members_.end(), true));
}

void key_state::keep(std::uint64_t r, detail::buffer_pool::buffer& b) {
  auto& out = out_[r % 2];
  if (!whole_.accumulates_wide())
    std::swap(out, b);
  else
    std::memcpy(out.data.get(), b.data.get(), bytes);  // out_ stays preallocated
}

}  // namespace bps::server
