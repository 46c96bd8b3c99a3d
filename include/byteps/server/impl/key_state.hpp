#pragma once
/// @file
/// The bodies of server/key_state.hpp's functions that are not templates: inline in header-only
/// mode, compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::server {

void key_state::take_input(int worker, const payload_ref& in) {
  auto w = static_cast<std::size_t>(worker);
  inputs_[w] = in;
  in_[w] = 0;
  ++arriving_;
}

std::pair<std::size_t, std::size_t> key_state::arrived(int worker, std::size_t bytes_in,
                                                       bool done) {
  auto w = static_cast<std::size_t>(worker);
  const std::size_t size = inputs_[w].bytes.size();
  if (done) {
    in_[w] = size;
    --arriving_;
  } else {
    in_[w] = std::min(bytes_in, size - 1);  // the last byte comes with `done`
  }
  // A piece needs every worker's bytes, so none is sent before a round is known to be sound.
  if (!round_error.empty() || pushed_ < static_cast<int>(inputs_.size())) return {answered_, 0};
  std::size_t ready = *std::min_element(in_.begin(), in_.end());
  if (ready < bytes && chunk_ > 0) ready -= ready % chunk_;  // (landed pushes come whole)
  if (ready <= answered_) return {answered_, 0};
  const std::size_t from = answered_;
  sources_.clear();
  for (const auto& i : inputs_) sources_.push_back(i.bytes.data() + from);
  reduce::sum_of(out_[round % 2].data.get() + from, sources_, (ready - from) / dtype_size(type),
                 type, scratch_);
  answered_ = ready;
  return {from, ready - from};
}

void key_state::next_round() {
  pushed_ = 0;
  std::fill(pushed_by_.begin(), pushed_by_.end(), false);
  for (auto& b : held_) pool_->give_back(std::move(b));
  previous_valid_ = round_error.empty() && shaped;
  round_error.clear();
  next_ = 0;
  added_ = 0;
  offered_ = false;
  for (auto& i : inputs_) i = {};  // the pushes' buffers go back once their links let go
  std::fill(in_.begin(), in_.end(), 0);
  arriving_ = 0;
  answered_ = 0;
  ++round;
}

void key_state::init_shape(const wire::header& h, dtype t, std::size_t size, int worker,
                           int num_workers, bool hold) {
  capture(h, t, size, worker);
  pushed_by_.assign(static_cast<std::size_t>(num_workers), false);
  if (failover_) held_.resize(static_cast<std::size_t>(num_workers));
  streamed_ = hold || (chunk_ > 0 && size >= 2 * chunk_);
  // A streamed key sums into out_ (fp16 and bf16 through scratch_). Its rounds may still come
  // whole (a handler that wraps sync_sum without cut_through gets whole pushes), and then go
  // through add() as any key's.
  if (streamed_) {
    inputs_.assign(static_cast<std::size_t>(num_workers), {});
    in_.assign(static_cast<std::size_t>(num_workers), 0);
  }
  if (type == dtype::float16 || type == dtype::bfloat16)
    wide_.assign(reduce::accumulator_bytes(type, bytes / dtype_size(type)), std::byte{0});
  // From the pool, so that on RDMA they are registered and answers go out without staging.
  if (streamed_ || !wide_.empty())
    for (auto& o : out_) o = pool_->take(bytes);
}

void key_state::add(detail::buffer_pool::buffer& b) {
  const std::size_t count = bytes / dtype_size(type);
  if (!wide_.empty()) {
    if (added_ == 0)
      reduce::accumulate_init(wide_.data(), b.data.get(), count, type);
    else
      reduce::accumulate_add(wide_.data(), b.data.get(), count, type);
  } else if (added_ == 0) {
    std::swap(out_[round % 2], b);  // the first contribution is the sum so far
  } else {
    reduce::accumulate_add(out_[round % 2].data.get(), b.data.get(), count, type);
  }
  ++added_;
}

void key_state::keep(std::uint64_t r, detail::buffer_pool::buffer& b) {
  auto& out = out_[r % 2];
  if (wide_.empty())
    std::swap(out, b);
  else
    std::memcpy(out.data.get(), b.data.get(), bytes);  // out_ stays preallocated
}

}  // namespace bps::server
