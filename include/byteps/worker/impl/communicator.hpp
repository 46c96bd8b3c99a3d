#pragma once
/// @file
/// The bodies of `bps::Communicator` (worker/communicator.hpp). Header-only mode includes them
/// from there; in compiled mode (`BYTEPS_COMPILED`) a translation unit that builds a
/// communicator of its own policies includes this header (or <byteps/bodies.hpp>).

#include <fmt/core.h>

#include <memory>
#include <string>
#include <utility>

#include "byteps/compress/compressor.hpp"
#include "byteps/local/local_collective.hpp"
#include "byteps/local/none.hpp"
#include "byteps/partition/partitioner.hpp"
#include "byteps/schedule/scheduler.hpp"
#include "byteps/transport/standard.hpp"
#include "byteps/transport/transport.hpp"
#include "byteps/worker/communicator.hpp"
#include "byteps/worker/node.hpp"
#include "byteps/worker/request_checks.hpp"

namespace bps {

template <class T, class L, class P, class S>
Communicator<T, L, P, S>::Communicator(const Config& cfg)
    : Communicator(cfg, transport_options::from(cfg)) {}

template <class T, class L, class P, class S>
Communicator<T, L, P, S>::Communicator(const Config& cfg, const transport_options& options) {
  static_assert(Transport<T>, "Communicator<T, ...>: T must model bps::Transport "
                              "(transport/transport.hpp)");
  static_assert(LocalCollective<L>, "Communicator<T, L, ...>: L must model "
                                    "bps::LocalCollective (local/local_collective.hpp)");
  static_assert(Partitioner<P>, "Communicator<T, L, P, ...>: P must model bps::Partitioner "
                                "(partition/partitioner.hpp)");
  static_assert(Scheduler<S>, "Communicator<T, L, P, S>: S must model bps::Scheduler "
                              "(schedule/scheduler.hpp)");
  node_ = std::make_unique<worker::node<T, L, P, S>>(cfg, options);
}

template <class T, class L, class P, class S>
Communicator<T, L, P, S>::~Communicator() {
  if (node_ && std::uncaught_exceptions() > unwinding_at_birth_)
    node_->shutdown("its program left by an exception while its communicator was alive");
}

template <class T, class L, class P, class S>
void Communicator<T, L, P, S>::declare_table(const table_spec& spec) {
  node_->declare_table(spec);
}

template <class T, class L, class P, class S>
handle Communicator<T, L, P, S>::pull_rows(std::string_view table,
                                           std::span<const std::uint64_t> ids, void* rows,
                                           std::size_t count, dtype type) {
  return node_->pull_rows(table, ids, rows, count, type);
}

template <class T, class L, class P, class S>
handle Communicator<T, L, P, S>::push_rows(std::string_view table,
                                           std::span<const std::uint64_t> ids, const void* grads,
                                           std::size_t count, dtype type) {
  return node_->push_rows(table, ids, grads, count, type);
}

template <class T, class L, class P, class S>
void Communicator<T, L, P, S>::save_table(std::string_view table, const std::string& dir) {
  node_->save_table(table, dir);
}

template <class T, class L, class P, class S>
void Communicator<T, L, P, S>::load_table(std::string_view table, const std::string& dir) {
  node_->load_table(table, dir);
}

template <class T, class L, class P, class S>
void Communicator<T, L, P, S>::register_memory(std::span<std::byte> memory) {
  node_->register_memory(memory);
}

template <class T, class L, class P, class S>
void Communicator<T, L, P, S>::shutdown() {
  node_->shutdown();
}

template <class T, class L, class P, class S>
void Communicator<T, L, P, S>::shutdown(const std::string& failure) {
  node_->shutdown(failure.empty() ? std::string("(no reason given)") : failure);
}

template <class T, class L, class P, class S>
int Communicator<T, L, P, S>::rank() const noexcept {
  return node_->rank();
}
template <class T, class L, class P, class S>
int Communicator<T, L, P, S>::size() const noexcept {
  return node_->size();
}

template <class T, class L, class P, class S>
std::optional<membership_event> Communicator<T, L, P, S>::step_boundary() {
  return node_->step_boundary();
}
template <class T, class L, class P, class S>
void Communicator<T, L, P, S>::register_state_bytes(std::string name, std::span<std::byte> data) {
  node_->register_state(std::move(name), data);
}
template <class T, class L, class P, class S>
void Communicator<T, L, P, S>::on_state(std::function<std::vector<std::byte>()> save,
                                        std::function<void(std::span<const std::byte>)> load) {
  node_->on_state(std::move(save), std::move(load));
}
template <class T, class L, class P, class S>
bool Communicator<T, L, P, S>::joined_running_job() const {
  return node_->joined_running_job();
}
template <class T, class L, class P, class S>
int Communicator<T, L, P, S>::machine() const noexcept {
  return node_->machine();
}
template <class T, class L, class P, class S>
int Communicator<T, L, P, S>::machines() const noexcept {
  return node_->machines();
}
template <class T, class L, class P, class S>
std::uint64_t Communicator<T, L, P, S>::job_id() const noexcept {
  return node_->job_id();
}
template <class T, class L, class P, class S>
int Communicator<T, L, P, S>::local_rank() const noexcept {
  return node_->local_rank();
}
template <class T, class L, class P, class S>
int Communicator<T, L, P, S>::local_size() const noexcept {
  return node_->local_size();
}

template <class T, class L, class P, class S>
handle Communicator<T, L, P, S>::push_pull(std::string_view name, void* data, std::size_t count,
                                           dtype type, push_pull_options opts) {
  worker::check_name("push_pull", name);
  return node_->submit(std::string(name), fmt::format("push_pull of '{}'", name), data, count,
                       type, std::move(opts), true, true);
}

template <class T, class L, class P, class S>
handle Communicator<T, L, P, S>::broadcast(std::string_view name, void* data, std::size_t count,
                                           dtype type, int root) {
  worker::check_name("broadcast", name);
  if (root < 0 || root >= size())
    throw usage_error(fmt::format(
        "broadcast of '{}': root {} is outside the group of {} workers (0 .. {})", name, root,
        size(), size() - 1));
  if (node_->async_mode())
    throw usage_error(fmt::format(
        "broadcast of '{}': not available in async mode (BYTEPS_ENABLE_ASYNC=1), where servers "
        "add every push into the parameters; the first push_pull of a tensor already gives "
        "every worker rank 0's values",
        name));
  // Ranks are machine-major: this machine's are the local_size() from rank() - local_rank().
  const int first_here = rank() - local_rank();
  const bool root_here = root >= first_here && root < first_here + local_size();
  return node_->submit("broadcast:" + std::string(name),
                       fmt::format("broadcast of '{}' from rank {}", name, root), data, count,
                       type, {.compressor = compress::none()}, rank() == root, root_here);
}

template <class T, class L, class P, class S>
void Communicator<T, L, P, S>::set_learning_rate(double lr) {
  node_->set_learning_rate(lr);
}

template <class T, class L, class P, class S>
void Communicator<T, L, P, S>::throw_if_failed() const {
  node_->throw_if_failed();
}

template <class T, class L, class P, class S>
comm_stats Communicator<T, L, P, S>::stats() {
  return node_->stats();
}

template <class T, class L, class P, class S>
void Communicator<T, L, P, S>::barrier() {
  node_->barrier();
}

}  // namespace bps
