#pragma once
/// @file
/// The bodies of server/whole_round.hpp: inline in header-only mode, compiled once into
/// byteps::compiled otherwise (core/linkage.hpp).

namespace bps::server {

void whole_round::shape(dtype t, std::size_t count, int num_workers) {
  type_ = t;
  count_ = count;
  if (rank_order_) held_.resize(static_cast<std::size_t>(num_workers));
  if (type_ == dtype::float16 || type_ == dtype::bfloat16)
    wide_.assign(reduce::accumulator_bytes(type_, count_), std::byte{0});
}

void whole_round::take(int worker, detail::buffer_pool::buffer& b,
                       detail::buffer_pool::buffer& sum, const std::vector<bool>& members) {
  if (!rank_order_) return add(b, sum);
  const auto w = static_cast<std::size_t>(worker);
  if (w != next_) {
    held_[w] = std::move(b);
    return;
  }
  add(b, sum);
  ++next_;
  skip_non_members(members);
  while (next_ < held_.size() && held_[next_].data) {
    add(held_[next_], sum);
    pool_->give_back(std::move(held_[next_]));
    ++next_;
    skip_non_members(members);
  }
}

void whole_round::add(detail::buffer_pool::buffer& b, detail::buffer_pool::buffer& sum) {
  if (!wide_.empty()) {
    if (added_ == 0)
      reduce::accumulate_init(wide_.data(), b.data.get(), count_, type_);
    else
      reduce::accumulate_add(wide_.data(), b.data.get(), count_, type_);
  } else if (added_ == 0) {
    std::swap(sum, b);  // the first contribution is the sum so far
  } else {
    reduce::accumulate_add(sum.data.get(), b.data.get(), count_, type_);
  }
  ++added_;
}

void whole_round::finish(detail::buffer_pool::buffer& sum) {
  if (!wide_.empty() && added_ > 0)
    reduce::accumulate_finish(sum.data.get(), wide_.data(), count_, type_);
}

void whole_round::next_round(const std::vector<bool>& members) {
  for (auto& b : held_) pool_->give_back(std::move(b));
  next_ = 0;
  skip_non_members(members);
  added_ = 0;
}

}  // namespace bps::server
