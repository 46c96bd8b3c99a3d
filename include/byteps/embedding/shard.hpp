#pragma once
/// @file
/// `embedding::shard`: the rows of one embedding table that one server holds, with the optimizer's
/// state beside them. A row exists from the first time it is pulled or pushed (its initial
/// values are table/placement.hpp's), so a server's memory is what the job touched, not the
/// table's size.
///
/// A synchronous round (`add_push`, then `apply_round` once every worker pushed) sums each
/// row's gradients in float32 in the workers' rank order, then applies the optimizer once per
/// row: the result does not depend on the order pushes arrived in. In asynchronous training
/// (`apply_now`) each push is applied alone, as it comes.
///
/// Not thread-safe: a server's engine owns it (one thread at a time).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <unordered_map>
#include <vector>

#include <fmt/core.h>

#include "byteps/core/dtype.hpp"
#include "byteps/reduce/half.hpp"
#include "byteps/embedding/optimizer.hpp"
#include "byteps/embedding/placement.hpp"
#include "byteps/embedding/table_spec.hpp"
#include "byteps/wire/codec.hpp"

namespace bps::embedding {

/// Loads `n` elements of `type` (float32, float16, bfloat16) at `src` as floats.
inline void widen(const std::byte* src, dtype type, float* dst, std::size_t n) {
  if (n == 0) return;  // an empty push's spans may be null
  switch (type) {
    case dtype::float16:
      reduce::widen_to_f32(reinterpret_cast<const float16*>(src), dst, n);
      return;
    case dtype::bfloat16:
      reduce::widen_to_f32(reinterpret_cast<const bfloat16*>(src), dst, n);
      return;
    default:
      std::memcpy(dst, src, n * sizeof(float));
  }
}

/// Stores `n` floats at `dst` as `type`, rounding to nearest even.
inline void narrow(const float* src, dtype type, std::byte* dst, std::size_t n) {
  if (n == 0) return;
  switch (type) {
    case dtype::float16:
      reduce::narrow_from_f32(src, reinterpret_cast<float16*>(dst), n);
      return;
    case dtype::bfloat16:
      reduce::narrow_from_f32(src, reinterpret_cast<bfloat16*>(dst), n);
      return;
    default:
      std::memcpy(dst, src, n * sizeof(float));
  }
}

/// A worker process's place in a round's order: machine-major, then local rank, as global ranks
/// are (a local rank is below 1024, rendezvous checks it).
constexpr std::uint32_t process_id(int machine, int local_rank) noexcept {
  return static_cast<std::uint32_t>(machine) * 1024u + static_cast<std::uint32_t>(local_rank);
}

class shard {
 public:
  /// `spec` has passed `check_spec` and its optimizer `optimizer::parse`; a round is complete
  /// with the pushes of `processes` worker processes.
  shard(table_spec spec, optimizer opt, int processes)
      : spec_(std::move(spec)),
        opt_(opt),
        row_bytes_(spec_.dim * dtype_size(spec_.type)),
        processes_(static_cast<std::size_t>(processes)) {}

  const table_spec& spec() const noexcept { return spec_; }
  std::size_t row_bytes() const noexcept { return row_bytes_; }

  /// Bytes this shard holds: its rows and their optimizer state.
  std::size_t bytes() const noexcept {
    return weights_.size() + state_.size() * sizeof(float) + steps_.size() * sizeof(std::uint64_t);
  }
  std::size_t rows_held() const noexcept { return slots_.size(); }

  /// Writes row `id` (stored type) at `out`.
  void read(std::uint64_t id, std::byte* out) {
    const std::size_t s = slot(id);  // first: a new row grows weights_
    std::memcpy(out, weights_.data() + s * row_bytes_, row_bytes_);
  }

  /// Whether some worker pushed in the current round (a load must wait for a round boundary).
  bool round_open() const noexcept { return !pushes_.empty(); }

  /// The shard as a checkpoint file holds it (embedding/checkpoint.hpp writes and reads the
  /// file): its rows in the order they were made, each with its id, its stored values, its
  /// optimizer state and its step count.
  std::vector<std::byte> serialise() const {
    std::vector<std::uint64_t> ids(slots_.size());
    for (const auto& [id, slot] : slots_) ids[slot] = id;
    return serialise_rows(ids);
  }

  /// Rows `ids` (each held) in `serialise`'s form: what a round changed, for the journal
  /// (embedding/journal.hpp).
  std::vector<std::byte> serialise_rows(std::span<const std::uint64_t> ids) const {
    wire::byte_writer w;
    const std::size_t state_size = per_state();
    w.put<std::uint64_t>(ids.size());
    auto& b = w.bytes();
    for (const auto id : ids) {
      const std::size_t s = slots_.at(id);
      w.put<std::uint64_t>(id);
      const std::byte* row = weights_.data() + s * row_bytes_;
      b.insert(b.end(), row, row + row_bytes_);
      const auto* state = reinterpret_cast<const std::byte*>(state_.data() + s * state_size);
      b.insert(b.end(), state, state + state_size * sizeof(float));
      w.put<std::uint64_t>(steps_[s]);
    }
    return w.take();
  }

  /// Replaces every row with those of `serialise`'s form; throws `wire::decode_error` saying
  /// what is wrong, changing nothing.
  void restore(std::span<const std::byte> in) {
    const auto count = checked_rows(in);
    std::unordered_map<std::uint64_t, std::size_t> slots;
    std::vector<std::byte> weights(count * row_bytes_);
    std::vector<float> state(count * per_state());
    std::vector<std::uint64_t> steps(count);
    for (std::size_t s = 0; s < count; ++s) {
      const std::byte* p = in.data() + 8 + s * per_row();
      const auto id = wire_id(p);
      if (!slots.emplace(id, s).second) throw wire::decode_error(fmt::format("row id {} twice", id));
      copy_row(p, weights.data() + s * row_bytes_, state.data() + s * per_state(), steps[s]);
    }
    slots_ = std::move(slots);
    weights_ = std::move(weights);
    state_ = std::move(state);
    steps_ = std::move(steps);
  }

  /// Overwrites (or makes) the rows in `in`, of `serialise_rows`' form, leaving the others:
  /// a journal's record of one round. Throws `wire::decode_error`, changing nothing.
  void merge(std::span<const std::byte> in) {
    const auto count = checked_rows(in);
    for (std::size_t k = 0; k < count; ++k) {
      const std::byte* p = in.data() + 8 + k * per_row();
      const std::size_t s = slot(wire_id(p));
      copy_row(p, weights_.data() + s * row_bytes_, state_.data() + s * per_state(), steps_[s]);
    }
  }

  /// The round this shard's pushes are for now: the next to complete.
  std::uint64_t round() const noexcept { return round_; }
  /// A journal's replay: the rounds before `r` are applied.
  void set_round(std::uint64_t r) noexcept { round_ = r; }
  /// Whether worker process `process` (ordered as global ranks: `process_id`) pushed in the
  /// current round already.
  bool pushed(std::uint32_t process) const { return pushes_.contains(process); }

  /// Worker process `process`'s push for the current round: `count` ids and their gradients
  /// (stored type), kept until `apply_round`.
  void add_push(std::uint32_t process, std::span<const std::byte> ids,
                std::span<const std::byte> values, std::uint64_t count) {
    pushes_[process] = decode(ids, values, count);
  }
  bool round_complete() const noexcept { return pushes_.size() == processes_; }

  /// Every worker pushed: sums each row's gradients in rank order and applies the optimizer to
  /// each row once, then opens the next round. Returns the ids of the rows it changed.
  std::vector<std::uint64_t> apply_round() {
    std::vector<worker_push> by_rank;
    for (auto& [process, p] : pushes_) by_rank.push_back(std::move(p));
    auto changed = apply_pushes(by_rank);
    pushes_.clear();
    ++round_;
    return changed;
  }

  /// Asynchronous training: a push applied at once, alone. Returns the ids of the rows it
  /// changed.
  std::vector<std::uint64_t> apply_now(std::span<const std::byte> ids,
                                       std::span<const std::byte> values, std::uint64_t count) {
    std::vector<worker_push> one;
    one.push_back(decode(ids, values, count));
    return apply_pushes(one);
  }

 private:
  struct worker_push {
    std::vector<std::uint64_t> ids;
    std::vector<float> grads;
  };

  // A push's `count` ids (little-endian u64s) and their gradients, widened to float32.
  worker_push decode(std::span<const std::byte> ids, std::span<const std::byte> values,
                     std::uint64_t count) const {
    worker_push p;
    p.ids.resize(count);
    for (std::size_t i = 0; i < count; ++i) p.ids[i] = wire_id(ids.data() + 8 * i);
    p.grads.resize(count * spec_.dim);
    widen(values.data(), spec_.type, p.grads.data(), p.grads.size());
    return p;
  }

  // Sums each row's gradients over `pushes` in their order, then applies the optimizer to each
  // row once; empties `pushes`. Returns the rows' ids, in the order they were first pushed.
  std::vector<std::uint64_t> apply_pushes(std::vector<worker_push>& pushes) {
    const std::size_t dim = spec_.dim;
    std::unordered_map<std::uint64_t, std::size_t> where;  // id -> its sum in `sums`
    std::vector<std::uint64_t> order;
    std::vector<float> sums;
    for (auto& p : pushes) {
      for (std::size_t i = 0; i < p.ids.size(); ++i) {
        const float* g = p.grads.data() + i * dim;
        auto [it, fresh] = where.try_emplace(p.ids[i], order.size());
        if (fresh) {
          order.push_back(p.ids[i]);
          sums.insert(sums.end(), g, g + dim);
        } else {
          float* sum = sums.data() + it->second * dim;
          for (std::size_t j = 0; j < dim; ++j) sum[j] = sum[j] + g[j];
        }
      }
      p = {};
    }
    std::vector<float> w(dim);
    const std::size_t state_size = per_state();
    for (std::size_t k = 0; k < order.size(); ++k) {
      const std::size_t s = slot(order[k]);
      std::byte* stored = weights_.data() + s * row_bytes_;
      widen(stored, spec_.type, w.data(), dim);
      opt_.apply(w.data(), sums.data() + k * dim, state_.data() + s * state_size, steps_[s], dim);
      narrow(w.data(), spec_.type, stored, dim);
    }
    return order;
  }

  std::size_t per_state() const noexcept { return opt_.state_per_element() * spec_.dim; }
  // A row's bytes in `serialise`'s form: id, stored values, optimizer state, step count.
  std::size_t per_row() const noexcept { return 8 + row_bytes_ + per_state() * sizeof(float) + 8; }

  // The row count of `in`, in `serialise`'s form, once its size and every id are checked.
  std::uint64_t checked_rows(std::span<const std::byte> in) const {
    wire::byte_reader r(in);
    const auto count = r.get<std::uint64_t>();
    if (count > (in.size() - 8) / per_row() || in.size() - 8 != count * per_row())
      throw wire::decode_error(fmt::format("{} rows in {} bytes, at {} bytes a row", count,
                                           in.size() - 8, per_row()));
    for (std::size_t s = 0; s < count; ++s)
      if (const auto id = wire_id(in.data() + 8 + s * per_row()); id >= spec_.rows)
        throw wire::decode_error(fmt::format("row id {} is out of range", id));
    return count;
  }

  // Copies one row of `serialise`'s form at `p` into its places.
  void copy_row(const std::byte* p, std::byte* weights, float* state, std::uint64_t& step) const {
    std::memcpy(weights, p + 8, row_bytes_);
    if (per_state() != 0)  // sgd keeps none, and its empty vector's data may be null
      std::memcpy(state, p + 8 + row_bytes_, per_state() * sizeof(float));
    step = wire_id(p + 8 + row_bytes_ + per_state() * sizeof(float));
  }

  static std::uint64_t wire_id(const std::byte* p) noexcept {
    return wire::detail::get_le<std::uint64_t>(p);
  }

  // Row `id`'s slot, created with its initial values on first touch.
  std::size_t slot(std::uint64_t id) {
    auto [it, fresh] = slots_.try_emplace(id, slots_.size());
    if (fresh) {
      std::vector<float> init(spec_.dim);
      for (std::uint32_t j = 0; j < spec_.dim; ++j)
        init[j] = initial_value(spec_.seed, id, j, spec_.init_scale);
      weights_.resize(weights_.size() + row_bytes_);
      narrow(init.data(), spec_.type, weights_.data() + it->second * row_bytes_, spec_.dim);
      state_.resize(state_.size() + opt_.state_per_element() * spec_.dim, opt_.initial_state());
      steps_.push_back(0);
    }
    return it->second;
  }

  table_spec spec_;
  optimizer opt_;
  std::size_t row_bytes_;
  std::unordered_map<std::uint64_t, std::size_t> slots_;
  std::vector<std::byte> weights_;   // by slot: the row in the stored type
  std::vector<float> state_;         // by slot: the optimizer's state
  std::vector<std::uint64_t> steps_; // by slot: adam's t
  std::size_t processes_;                          // the pushes that make a round
  std::map<std::uint32_t, worker_push> pushes_;  // by process, in rank order: this round's
  std::uint64_t round_ = 1;
};

}  // namespace bps::embedding
