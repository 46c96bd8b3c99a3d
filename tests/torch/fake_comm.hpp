#pragma once
// A stand-in for bps::Communicator in the plugin's unit tests: it records every push_pull
// (name, buffer, count, dtype, options) and hands back a handle that completes only when the
// test says so, so that a test sees what the plugin asks of the communicator and when, and can
// hold an exchange "in flight". Broadcasts go through a store that several fake ranks share:
// the root's call puts its bytes there, a later call of another rank takes them.
// With `async_server` set, push_pull behaves as the async servers do for one worker: the first
// call of a tensor keeps its values as the servers' parameters; each later one adds the
// buffer to them and writes the sum back.

#include <byteps/core/dtype.hpp>
#include <byteps/core/handle.hpp>
#include <byteps/core/op_state.hpp>
#include <byteps/core/push_pull_options.hpp>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace bps::test {

class fake_comm {
 public:
  struct call {
    std::string name;
    void* data;
    std::size_t count;
    dtype type;
    push_pull_options opts;
    std::shared_ptr<detail::op_state> op;
  };
  using store = std::map<std::string, std::vector<std::byte>>;

  explicit fake_comm(int rank = 0, store* shared = nullptr) : rank_(rank), store_(shared) {}

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return 1; }

  handle push_pull(std::string_view name, void* data, std::size_t count, dtype type,
                   push_pull_options opts = {}) {
    auto op = started("push_pull of '" + std::string(name) + "'");
    calls.push_back({std::string(name), data, count, type, opts, op});
    if (async_server) {
      auto* v = static_cast<float*>(data);
      auto [it, fresh] = server_params.try_emplace(std::string(name), v, v + count);
      if (!fresh)
        for (std::size_t i = 0; i < count; ++i) v[i] = it->second[i] += v[i];
    }
    if (finish_at_once) op->finish(nullptr);
    return handle(op);
  }

  template <class E>
  handle broadcast(std::string_view name, std::span<E> data, int root) {
    return broadcast(name, data.data(), data.size(), dtype_v<E>, root);
  }

  handle broadcast(std::string_view name, void* data, std::size_t count, dtype type, int root) {
    if (!store_) throw std::logic_error("fake_comm: broadcast needs a store");
    const std::size_t bytes = count * dtype_size(type);
    auto& kept = (*store_)[std::string(name)];
    if (rank_ == root) {
      kept.assign(static_cast<std::byte*>(data), static_cast<std::byte*>(data) + bytes);
    } else {
      if (kept.size() != bytes)
        throw std::logic_error("fake_comm: the root has not broadcast '" + std::string(name) +
                               "' with this size");
      std::memcpy(data, kept.data(), bytes);
    }
    broadcasts.push_back(std::string(name));
    auto op = started("broadcast of '" + std::string(name) + "'");
    op->finish(nullptr);
    return handle(op);
  }

  /// Completes every push_pull still in flight.
  void finish_all() {
    for (auto& c : calls) {
      bool done;
      {
        std::lock_guard lock(c.op->mu);
        done = c.op->done;
      }
      if (!done) c.op->finish(nullptr);
    }
  }

  std::vector<call> calls;
  std::vector<std::string> broadcasts;
  bool finish_at_once = false;
  bool async_server = false;
  /// With async_server: the servers' parameters, by tensor name (a test may change them, as
  /// another worker's pushes would).
  std::map<std::string, std::vector<float>> server_params;

 private:
  static std::shared_ptr<detail::op_state> started(std::string what) {
    auto op = std::make_shared<detail::op_state>();
    op->what = std::move(what);
    op->deadline = detail::op_state::clock::now() + std::chrono::seconds(60);
    return op;
  }

  int rank_;
  store* store_;
};

}  // namespace bps::test
