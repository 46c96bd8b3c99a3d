#pragma once
/// @file
/// `bps::worker::node<Transport, LocalCollective, Partitioner, Scheduler>`: the worker behind
/// `bps::Communicator`. It joins the cluster and owns the parts that each do one job (the links to
/// the servers, the dispatcher, the local stage, failover when it is on, the timeline). What the
/// parts share lives in one `shared_state` they are handed, with the one failure path: whatever
/// goes wrong, `shared_state::die_locked` fails every operation in flight with the reason and
/// closes the links, once.
///
/// An operation's way: with a local collective, the local stage (worker/local_stage.hpp) runs it
/// and hands its owned partitions to the network stage here one by one as it reduces them
/// (`network_port`); without one, `start` queues every partition at once. The dispatcher sends
/// them as the scheduler allows; each server's answer is read into the operation's memory by
/// `answers` (with failover, into a kept copy first); the local stage gathers each sum as it
/// comes.
///
/// @par Thread Safety
/// The shared state's mutex guards what the parts share; the links' I/O threads, the local
/// stage's thread, the failover timer and the callers' threads all take it briefly. Sends never
/// block under it.

#include <fmt/core.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "byteps/core/config.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/handle.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/core/log.hpp"
#include "byteps/core/op_state.hpp"
#include "byteps/core/push_pull_options.hpp"
#include "byteps/detail/tracer.hpp"
#include "byteps/local/local_collective.hpp"
#include "byteps/partition/partitioner.hpp"
#include "byteps/reduce/reducer.hpp"
#include "byteps/rendezvous/client.hpp"
#include "byteps/schedule/scheduler.hpp"
#include "byteps/embedding/table_spec.hpp"
#include "byteps/transport/transport.hpp"
#include "byteps/worker/answers.hpp"
#include "byteps/worker/compressor_choice.hpp"
#include "byteps/worker/deadline_timer.hpp"
#include "byteps/worker/dispatcher.hpp"
#include "byteps/worker/failover.hpp"
#include "byteps/worker/fusion.hpp"
#include "byteps/worker/join_state.hpp"
#include "byteps/worker/local_stage.hpp"
#include "byteps/worker/membership.hpp"
#include "byteps/worker/op_table.hpp"
#include "byteps/worker/request_checks.hpp"
#include "byteps/worker/row_calls.hpp"
#include "byteps/worker/server_links.hpp"
#include "byteps/worker/server_receiver.hpp"
#include "byteps/worker/shared_state.hpp"
#include "byteps/worker/stats.hpp"

namespace bps::worker {

template <class T, class L, class P, class S>
class node {
  static_assert(Transport<T> && LocalCollective<L> && Partitioner<P> && Scheduler<S>,
                "worker::node<T, L, P, S>: each policy must model its concept");

 public:
  using link_ptr = std::shared_ptr<typename T::link>;
  using clock = std::chrono::steady_clock;

  node(const Config& cfg, const typename T::options& transport_options)
      : cfg_(cfg),
        transport_(cfg, transport_options),
        control_(transport_, cfg),
        log_(cfg.log, "worker"),
        local_(cfg),
        compressor_choice_(cfg),
        trace_(cfg, role::worker),
        stage_(
            local_, network_port_for_stage(),
            [this](const std::string& why) {
              std::lock_guard lock(state_.mu);
              state_.die_locked(why);
            },
            state_.life, trace_, deadlines_, cfg.wait_poll, segment_sharing()) {
    if constexpr (!L::is_identity)
      state_.also_fail = [this] { stage_.wake_to_end(); };
    try {
      join();
    } catch (...) {
      {
        std::lock_guard lock(state_.mu);
        state_.life.close();
      }
      control_.stop_heartbeats();  // their failure callback locks state_.mu, which goes before them
      transport_.stop();
      stop_local();
      throw;
    }
  }
  node(const node&) = delete;
  node& operator=(const node&) = delete;
  ~node() { shutdown(); }

  /// Registers a trainer's memory with the transport (Communicator::register_memory).
  void register_memory(std::span<std::byte> m) {
    transport_.register_memory(m);
    answers_.registered(m);
  }

  /// Fails what is in flight, says bye, stops the local stage; idempotent. A non-empty
  /// `failure` goes with the bye: the scheduler and the servers then fail the job with it. A
  /// dead communicator's bye carries what killed it instead.
  void shutdown(const std::string& failure = {}) {
    deadlines_.stop();  // what is in flight fails now, and its expiry must not race the stop
    leave(failure);
    stop_local();
    trace_.write(control_.clock_offset(), log_);
  }

  /// BYTEPS_ENABLE_ASYNC: a push_pull pushes a delta and gets the parameters back.
  bool async_mode() const noexcept { return cfg_.enable_async; }
  int rank() const noexcept { return membership_ ? membership_->rank() : global_rank_; }
  int size() const noexcept { return membership_ ? membership_->size() : state_.global_size; }
  /// Elastic training: what a worker joining the running job is given (worker/join_state.hpp).
  void register_state(std::string name, std::span<std::byte> bytes) {
    registry_.add(std::move(name), bytes);
  }
  void on_state(state_registry::save_fn save, state_registry::load_fn load) {
    registry_.callbacks(std::move(save), std::move(load));
  }
  bool joined_running_job() const { return membership_ && membership_->joined_running_job(); }
  std::optional<membership_event> step_boundary() {
    return membership_ ? membership_->step_boundary() : std::nullopt;
  }
  int machine() const noexcept { return state_.machine; }
  int machines() const noexcept { return num_workers_; }
  std::uint64_t job_id() const noexcept { return job_id_; }
  int local_rank() const noexcept { return local_.local_rank(); }
  int local_size() const noexcept { return local_.local_size(); }

  /// A push_pull or broadcast: through the local stage when the policy has one, else straight
  /// to the dispatcher. A broadcast's non-roots do not `contribute`, nor, on a machine without
  /// its root, does the machine (`machine_contributes`).
  handle submit(std::string name, std::string what, void* data, std::size_t count, dtype type,
                push_pull_options opts, bool contributes, bool machine_contributes) {
    check_request(what, data, count, type, opts);
    if (cfg_.enable_async && opts.average)
      throw usage_error(fmt::format(
          "{}: average is not defined in async mode (BYTEPS_ENABLE_ASYNC=1): the push is a "
          "delta the servers add into the parameters, and the answer is the parameters, not a "
          "sum to divide; scale the delta before pushing instead",
          what));
    opts.compressor = compressor_choice_.for_operation(what, count * dtype_size(type),
                                                       std::move(opts.compressor));
    const auto deadline = clock::now() + cfg_.op_timeout;
    if constexpr (!L::is_identity) {
      {
        std::lock_guard lock(state_.mu);
        state_.life.throw_if_gone({});
      }
      local::work w;
      w.name = std::move(name);
      w.what = std::move(what);
      w.data = data;
      w.count = count;
      w.type = type;
      w.opts = opts;
      w.contributes = contributes;
      w.machine_contributes = machine_contributes;
      w.deadline = deadline;
      return stage_.submit(std::move(w));
    } else {
      // Non-contributors push zeros, so the servers' sum is the root's data bit for bit: -0.0
      // for floating dtypes, since x + (-0.0) is x for every x, -0.0 and NaN included.
      if (!contributes && data != nullptr) reduce::fill_negative_zero(data, count, type);
      return start(std::move(name), std::move(what), data, count, type, opts, deadline,
                   machine_contributes);
    }
  }

  /// Embedding tables (worker/impl/node_rows.hpp): a declaration every server acknowledged
  /// (blocks), and pulls and pushes of rows that return at once.
  void declare_table(const table_spec& spec);
  handle pull_rows(std::string_view name, std::span<const std::uint64_t> ids, void* rows,
                   std::size_t count, dtype type);
  handle push_rows(std::string_view name, std::span<const std::uint64_t> ids, const void* grads,
                   std::size_t count, dtype type);
  void save_table(std::string_view name, const std::string& dir);
  void load_table(std::string_view name, const std::string& dir);

  /// Throughput and stage times over the last 10 s, bytes per server, operations in flight.
  comm_stats stats() {
    std::lock_guard lock(state_.mu);
    auto s = ops().stats().snapshot(ops().active().size());
    s.operation_records = ops().records();
    s.partition_records = ops().part_records();
    return s;
  }

  void throw_if_failed() const {
    std::lock_guard lock(state_.mu);
    if (const auto why = state_.life.failure(); !why.empty())
      throw communicator_error("this communicator is dead: " + why);
  }

  /// Every compressor gets `lr` before its next encode (error feedback's rate ratio).
  void set_learning_rate(double lr) {
    if (!(lr > 0) || !std::isfinite(lr))
      throw usage_error(
          fmt::format("set_learning_rate: the rate must be positive and finite, got {}", lr));
    std::lock_guard lock(state_.mu);
    state_.dispatcher.set_learning_rate(lr);
  }

  void barrier() {
    std::uint64_t n;
    {
      std::lock_guard lock(state_.mu);
      state_.life.throw_if_gone({});
      n = barriers_++;
    }
    try {
      control_.barrier(n, cfg_.op_timeout);
    } catch (const communicator_error& e) {
      std::lock_guard lock(state_.mu);
      state_.die_locked(e.what());
      throw;
    }
  }

 private:
  op_table& ops() noexcept { return state_.ops(); }

  // Joins the job: the rendezvous, the machine's local ranks, a link to every server
  // (worker/impl/node_join.hpp).
  void join();
  void take_job_state();

  // What the local stage asks of the network stage: its plan of a tensor, and its owned
  // partitions awaited in the operation's record and released one by one.
  network_port network_port_for_stage() {
    network_port port;
    port.plan = [this](const std::string& name, std::size_t count, dtype type) {
      return state_.dispatcher.plan(name, count, type, slices_);
    };
    port.open = [this](const local::work& w, std::size_t first, std::size_t last) {
      const auto& op = w.state;
      const auto esize = dtype_size(w.type);
      const auto owned = w.parts.subspan(first, last - first);
      std::lock_guard lock(state_.mu);
      state_.life.throw_if_gone({});
      op->data = {w.owned, (owned.back().last - owned.front().first) * esize};
      op->average = w.opts.average && state_.global_size > 1;
      op->holds_no_data = !w.machine_contributes;
      state_.dispatcher.open(op, w.name, owned, first, state_.links.size(), w.opts);
    };
    port.release = [this](const local::work& w, std::size_t i) {
      std::lock_guard lock(state_.mu);
      trace_.queued(*w.state, i);
      state_.dispatcher.release(key_id{w.parts[i].key, w.parts[i].index});
      dispatch_locked();
    };
    port.cancel = [this](const op_ptr& op, std::exception_ptr e) {
      std::lock_guard lock(state_.mu);
      ops().fail(op, std::move(e));
    };
    port.expire = [this](detail::op_state& o) { expire(o); };
    port.record = [this](const stage_times& t) {
      std::lock_guard lock(state_.mu);
      ops().stats().local_steps(t);
    };
    return port;
  }

  // What the local stage tells the transport of the segments its slices lie in.
  auto segment_sharing() {
    if constexpr (transport::SharesMemory<T>) {
      return [this](const std::string& name, std::span<std::byte> memory) {
        transport_.share_memory(name, memory);
      };
    } else {
      return nullptr;
    }
  }

  // Connects to `server` at `where` and says peer_hello, on fresh connections while the
  // server turns them away before its challenge (server_links::connect_and_hello). Null when
  // `gone()`; throws `communicator_error` at BYTEPS_CONNECT_TIMEOUT_MS.
  template <class Adopt, class Gone>
  link_ptr connect_link(const rendezvous::address& where, int server, std::uint64_t generation,
                        Adopt&& adopt, Gone&& gone) {
    const typename server_links<T>::hello_terms terms{
        .machine = state_.machine,
        .local_rank = cfg_.local_rank,
        .job_token = cfg_.job_token,
        .hello_timeout = cfg_.hello_timeout,
        .connect_timeout = cfg_.connect_timeout,
        .log = &log_,
    };
    return server_links<T>::connect_and_hello(
        transport_, where, server,
        std::make_shared<server_receiver<answers<state_type>>>(&answers_, server, generation),
        terms, std::forward<Adopt>(adopt), std::forward<Gone>(gone));
  }

  void leave(const std::string& failure) {
    std::vector<link_ptr> links;
    std::string why = failure;
    {
      std::lock_guard lock(state_.mu);
      if (!state_.life.close()) return;
      if constexpr (!L::is_identity) stage_.wake_to_end();
      for (auto& op : ops().active())
        ops().fail(op, std::make_exception_ptr(communicator_error(
                           op->what + ": the communicator was shut down before it finished")));
      if (const auto failure = state_.life.failure(); failure.empty())
        links = state_.links.live();
      else
        why = failure;  // its servers' links closed as it failed, after its last word to them
    }
    if (failover_) failover_->stop();  // a reconnect in progress ends first (closing is set)
    // Bye, so that servers and the scheduler know whether this exit is a failure, and which.
    // A dead communicator's bye carries what killed it (a lost server, say): the scheduler
    // reports that node to the others, not the exit of this worker that fell after it.
    server_links<T>::say_bye(links, why,
                             [&](auto on_sent) { control_.bye(std::move(on_sent), why); });
    transport_.stop();
  }

  // Ends the local stage's thread (failing what it still runs), then frees the policy's
  // resources.
  void stop_local() {
    if constexpr (!L::is_identity) stage_.stop();
    local_.shutdown();
  }

  // The push and pull of `data` (the caller's buffer, or the local stage's slice in host
  // memory), bounded by `deadline`; `holds_data` false: a broadcast's zeros (wire::flag_no_data).
  handle start(std::string name, std::string what, void* data, std::size_t count, dtype type,
               push_pull_options opts, clock::time_point deadline, bool holds_data) {
    check_request(what, data, count, type, opts);
    auto op = std::make_shared<detail::op_state>();
    op->what = std::move(what);
    op->data = {static_cast<std::byte*>(data), count * dtype_size(type)};
    op->type = type;
    op->average = opts.average && state_.global_size > 1;
    op->holds_no_data = !holds_data;
    op->key = tensor_key(name);
    op->deadline = deadline;
    op->wait_poll = cfg_.wait_poll;
    op->on_deadline = [this](detail::op_state& o) { expire(o); };

    {
      std::lock_guard lock(state_.mu);
      state_.life.throw_if_gone({});
      tensor& t = state_.dispatcher.enqueue(op, std::move(name), count, state_.links.size(), opts);
      if (t.parts.empty()) {
        op->released = true;
        op->finish(nullptr);
        return handle(op);
      }
      trace_.begin(*op, t.name, t.round, t.parts.size());
      dispatch_locked();
    }
    deadlines_.watch(op);
    return handle(op);
  }

  // A table call's record, with the worker's deadline; one request of it to `server`; its
  // deadline passed (worker/impl/node_rows.hpp).
  std::shared_ptr<detail::op_state> row_operation(std::string what);
  void check_frame_sizes(const std::vector<row_request>& requests, const table_record& t,
                         std::string_view what) const;
  void send_rows(int server, const table_record& t, std::uint64_t round,
                 const std::shared_ptr<std::vector<std::byte>>& payload);
  // Under the mutex: `payload` (a declare, save or load) to every server as requests of `op`,
  // server s's answer copied into `answers[s]` when `answers` is not empty.
  void ask_every_server(const std::shared_ptr<detail::op_state>& op, const table_record& t,
                        std::vector<std::byte> payload,
                        const std::vector<std::shared_ptr<std::vector<std::byte>>>& answers);
  void expire_rows(detail::op_state& o);

  // The send path (worker/impl/node_send.hpp): one dispatch pass, its pushes alone or fused,
  // and what happens once their payloads left.
  void dispatch_locked();
  void send_pushes(int server, std::vector<held_push>&& pushes);
  void sent(std::span<const batch_member> members);

  // An operation's deadline passed (the deadline timer's thread): name what it still waits
  // for, then give up on the whole communicator (its servers' state for that round is unknown).
  void expire(detail::op_state& o) {
    std::lock_guard lock(state_.mu);
    if (o.released || state_.life.dead()) return;
    auto detail = state_.links.describe_waiting(ops().unanswered_by_server(o, state_.links.size()));
    state_.die_locked(fmt::format(
        "{} did not finish within {} ms (BYTEPS_OP_TIMEOUT_MS); still waiting "
        "for {}. A worker may not have called it, or a node is stuck.",
        o.what, cfg_.op_timeout.count(), detail.empty() ? std::string("its sends") : detail));
  }

  using state_type = shared_state<T, P, S>;

  Config cfg_;
  T transport_;  // first: the links below need its I/O context
  rendezvous::client<T> control_;
  logger log_;
  L local_;
  compressor_choice compressor_choice_;   // checks BYTEPS_COMPRESSOR when the node is built
  detail::tracer trace_;                  // timeline: null when BYTEPS_TRACE_ON=0
  state_type state_{cfg_, log_, trace_};  // what the parts below share under its mutex
  static constexpr bool registers_memory = requires { requires T::registers_memory; };
  push_fusion fusion_{cfg_, registers_memory};  // empty between dispatch passes
  std::uint64_t barriers_ = 0;
  int num_workers_ = 1;
  int global_rank_ = 0;
  int slices_ = 1;  // slices per tensor: the largest local size in the job
  std::uint64_t job_id_ = 0;
  deadline_timer deadlines_{cfg_.op_timeout};       // every operation's deadline; stops first
  local_stage_for<L> stage_;                        // after the members its callbacks use
  answers<state_type> answers_{state_};             // what the servers send
  state_registry registry_;                         // the trainer's, for joining workers
  std::unique_ptr<membership<state_type>> membership_;  // elastic training only
  std::unique_ptr<failover<state_type>> failover_;  // null with failover off; last: stops first
};

}  // namespace bps::worker

#include "byteps/worker/impl/node_join.hpp"
#include "byteps/worker/impl/node_rows.hpp"
#include "byteps/worker/impl/node_send.hpp"
