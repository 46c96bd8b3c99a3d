#pragma once
/// @file
/// The bodies of server/lent_round.hpp: inline in header-only mode, compiled once into
/// byteps::compiled otherwise (core/linkage.hpp).

namespace bps::server {

void lent_round::hold(int num_workers) {
  inputs_.assign(static_cast<std::size_t>(num_workers), {});
  in_.assign(static_cast<std::size_t>(num_workers), 0);
}

void lent_round::take(int worker, const payload_ref& in) {
  const auto w = static_cast<std::size_t>(worker);
  inputs_[w] = in;
  in_[w] = 0;
  ++arriving_;
}

std::pair<std::size_t, std::size_t> lent_round::arrived(int worker, std::size_t bytes_in, bool done,
                                                        bool summable, std::span<std::byte> sum,
                                                        dtype t,
                                                        const std::vector<bool>& members) {
  const auto w = static_cast<std::size_t>(worker);
  const std::size_t size = inputs_[w].bytes.size();
  if (done) {
    in_[w] = size;
    --arriving_;
  } else {
    in_[w] = std::min(bytes_in, size - 1);  // the last byte comes with `done`
  }
  // A piece needs every worker's bytes, so none is sent before a round is known to be sound.
  if (!summable) return {answered_, 0};
  std::size_t ready = sum.size();
  for (std::size_t i = 0; i < in_.size(); ++i)
    if (members[i]) ready = std::min(ready, in_[i]);
  const std::size_t chunk = chunk_for(max_chunk_, sum.size());
  if (ready < sum.size() && chunk > 0) ready -= ready % chunk;  // (landed pushes come whole)
  if (ready <= answered_) return {answered_, 0};
  const std::size_t from = answered_;
  sources_.clear();
  for (std::size_t i = 0; i < inputs_.size(); ++i)
    if (members[i]) sources_.push_back(inputs_[i].bytes.data() + from);
  reduce::sum_of(sum.data() + from, sources_, (ready - from) / dtype_size(t), t);
  answered_ = ready;
  return {from, ready - from};
}

void lent_round::next_round() {
  for (auto& i : inputs_) i = {};  // the pushes' buffers go back once their links let go
  std::fill(in_.begin(), in_.end(), 0);
  arriving_ = 0;
  answered_ = 0;
}

}  // namespace bps::server
