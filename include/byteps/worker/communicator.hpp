#pragma once
/// @file
/// `bps::Communicator<Transport, LocalCollective, Partitioner, Scheduler>`: a worker's side of
/// BytePS. `push_pull` cuts a tensor into partitions, sends each to the server its key hashes
/// to (all servers in parallel, in the scheduler's order), and each server answers with the sum
/// over all workers, which is read straight into the caller's buffer. Nothing blocks the caller
/// until it waits on the returned handle.
///
/// Tensors are declared on first use with no global barrier: a tensor's key is a hash of its
/// name, so workers agree whatever order tensors first appear in; the first push of a tensor to
/// a server is preceded by a `declare` frame carrying its name, in order on the same link.
///
/// With failover on (`Config::failover_timeout` > 0) the loss of a server is survived when the
/// scheduler replaces it: see worker/failover.hpp for the protocol. Answers then pass through a
/// kept copy per partition (one more copy of every tensor's bytes in memory).
///
/// @par Thread Safety
/// All member functions may be called from several threads. The caller's buffer must stay
/// alive and untouched until the operation's handle is done (also when it fails).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "byteps/core/config.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/handle.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/core/log.hpp"
#include "byteps/core/op_state.hpp"
#include "byteps/core/push_pull_options.hpp"
#include "byteps/detail/timer_thread.hpp"
#include "byteps/detail/tracer.hpp"  // timeline
#include "byteps/local/local_collective.hpp"
#include "byteps/partition/partitioner.hpp"
#include "byteps/partition/placement.hpp"
#include "byteps/reduce/reducer.hpp"
#include "byteps/rendezvous/client.hpp"
#include "byteps/schedule/scheduler.hpp"
#include "byteps/transport/transport.hpp"
#include "byteps/worker/failover.hpp"
#include "byteps/worker/local_stage.hpp"
#include "byteps/worker/op_table.hpp"

namespace bps {

template <Transport T, LocalCollective L, Partitioner P, Scheduler S>
class Communicator {
 public:
  using link_ptr = std::shared_ptr<typename T::link>;
  using clock = std::chrono::steady_clock;

  /// Joins the cluster: connects to the scheduler, waits for every node (at most
  /// `Config::rendezvous_timeout`), then connects to every server. The transport is built with
  /// `transport_options`, or without them with `T::options::from(cfg)` (the environment's).
  explicit Communicator(const Config& cfg) : Communicator(cfg, T::options::from(cfg)) {}
  Communicator(const Config& cfg, const typename T::options& transport_options)
      : cfg_(cfg),
        transport_(cfg, transport_options),
        control_(transport_, cfg),
        log_(cfg.log, "worker"),
        local_(cfg),
        partitioner_(cfg),
        placement_(cfg),
        scheduler_(make_scheduler<S>(cfg, partitioner_.bound())),
        stage_(local_, [this](auto&&... a) { return start(std::forward<decltype(a)>(a)...); },
               [this](const std::string& why) {
                 std::lock_guard lock(mu_);
                 die_locked(why);
               }),
        trace_(cfg, role::worker) {
    try {
      join();
    } catch (...) {
      {
        std::lock_guard lock(mu_);
        closing_ = true;
      }
      transport_.stop();
      stop_local();
      throw;
    }
  }
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator() { shutdown(); }

  /// Leaves the job: operations still in flight fail, servers and the scheduler are told this
  /// worker is done (so its exit is no failure), and later calls throw `usage_error`. The
  /// destructor does this too. Idempotent.
  void shutdown() {
    leave();
    stop_local();
    trace_.write(control_.clock_offset(), log_);  // timeline
  }

  /// This process among all worker processes (machine-major), and their number.
  int rank() const noexcept { return global_rank_; }
  int size() const noexcept { return global_size_; }
  /// This machine (DMLC_WORKER_ID) and the number of machines (DMLC_NUM_WORKER).
  int machine() const noexcept { return rank_; }
  int machines() const noexcept { return num_workers_; }
  /// Random per job, the same on every node: names what the job keeps outside the process
  /// (shared-memory segments are /dev/shm/bps-<job id as 16 hex digits>-...).
  std::uint64_t job_id() const noexcept { return job_id_; }
  int local_rank() const noexcept { return local_.local_rank(); }
  int local_size() const noexcept { return local_.local_size(); }

  /// Sums `data` over all workers, in place. Returns at once.
  template <element_type E>
  handle push_pull(std::string_view name, std::span<E> data, push_pull_options opts = {}) {
    static_assert(!std::is_const_v<E>, "push_pull writes the sum into the span: it cannot be const");
    return push_pull(name, data.data(), data.size(), dtype_v<E>, opts);
  }

  /// The type-erased form: `count` elements of `type` at `data`.
  handle push_pull(std::string_view name, void* data, std::size_t count, dtype type,
                   push_pull_options opts = {}) {
    check_name("push_pull", name);
    auto what = fmt::format("push_pull of '{}'", name);
    if constexpr (!L::is_identity)
      return start_local(std::string(name), std::move(what), data, count, type, opts, true);
    return start(std::string(name), std::move(what), data, count, type, opts,
                 clock::now() + cfg_.op_timeout);
  }

  /// Copies `root`'s `data` into every worker's `data`. Returns at once.
  template <element_type E>
  handle broadcast(std::string_view name, std::span<E> data, int root) {
    static_assert(!std::is_const_v<E>, "broadcast writes into the span: it cannot be const");
    return broadcast(name, data.data(), data.size(), dtype_v<E>, root);
  }

  handle broadcast(std::string_view name, void* data, std::size_t count, dtype type, int root) {
    check_name("broadcast", name);
    if (root < 0 || root >= size())
      throw usage_error(fmt::format("broadcast of '{}': root {} is outside the group of {} "
                                    "workers (0 .. {})",
                                    name, root, size(), size() - 1));
    auto what = fmt::format("broadcast of '{}' from rank {}", name, root);
    if constexpr (!L::is_identity)
      return start_local("broadcast:" + std::string(name), std::move(what), data, count, type, {},
                         rank() == root);
    // Non-roots contribute zeros, so the servers' sum is root's data bit for bit: -0.0 for
    // floating dtypes, since x + (-0.0) is x for every x, -0.0 and NaN included.
    if (rank() != root && data != nullptr && dtype_from_wire(static_cast<std::uint32_t>(type)))
      reduce::fill_negative_zero(data, count, type);
    return start("broadcast:" + std::string(name), std::move(what), data, count, type, {},
                 clock::now() + cfg_.op_timeout);
  }

  /// Throws `communicator_error` (naming the dead node and why) if the cluster has failed, even
  /// with no operation in flight: a trainer can call it between steps.
  void throw_if_failed() const {
    std::lock_guard lock(mu_);
    if (!dead_.empty()) throw communicator_error("this communicator is dead: " + dead_);
  }

  /// Blocks until every worker called barrier, at most `Config::op_timeout`.
  void barrier() {
    std::uint64_t n;
    {
      std::lock_guard lock(mu_);
      throw_if_dead_locked();
      n = barriers_++;
    }
    try {
      control_.barrier(n, cfg_.op_timeout);
    } catch (const communicator_error& e) {
      std::lock_guard lock(mu_);
      die_locked(e.what());
      throw;
    }
  }

 private:
  class server_receiver;
  using op_ptr = worker::op_ptr;

  using server_link = worker::server_slot<typename T::link>;

  class server_receiver final : public transport::receiver {
   public:
    server_receiver(Communicator* owner, int server, std::uint64_t generation)
        : owner_(owner), server_(server), generation_(generation) {}

    std::span<std::byte> payload_destination(const wire::header& h, std::string& reason) override {
      if (h.type == wire::msg::pull_response) {
        receiving_id_ = key_id{h.key, h.part};
        if (auto dest = owner_->answer_destination(h, receiving_); !dest.empty()) return dest;
        discard_.resize(h.payload_bytes);  // an answer for an operation that already failed
        return discard_;
      }
      if (h.type == wire::msg::error && h.payload_bytes <= 65536) {
        discard_.resize(h.payload_bytes);
        return discard_;
      }
      reason = fmt::format("unexpected {} frame from a server", wire::msg_name(h.type));
      return {};
    }

    void on_message(const wire::header& h, std::span<std::byte> payload) override {
      if (h.type == wire::msg::pull_response) {
        if (auto op = std::move(receiving_)) owner_->answered(h, std::move(op), payload);
        return;
      }
      owner_->server_error(server_, generation_, h,
                           std::string(reinterpret_cast<const char*>(payload.data()),
                                       payload.size()));
    }

    void on_close(const std::string& reason) override {
      owner_->server_closed(server_, generation_, std::move(receiving_), receiving_id_, reason);
    }

   private:
    Communicator* owner_;
    int server_;
    std::uint64_t generation_;
    op_ptr receiving_;  // I/O thread only
    key_id receiving_id_;
    std::vector<std::byte> discard_;
  };

  void join() {
    cfg_.validate();
    auto welcome = control_.join(rendezvous::hello::from(cfg_, role::worker));
    rank_ = welcome.rank;
    num_workers_ = welcome.num_workers;
    global_rank_ = welcome.global_rank;
    global_size_ = welcome.global_size;
    job_id_ = welcome.job_id;
    log_.rename(local_.local_size() > 1
                    ? fmt::format("worker {}.{}", rank_, local_.local_rank())
                    : fmt::format("worker {}", rank_));
    trace_.name_node(global_rank_, log_.who(), rank_);  // timeline
    if (L::is_identity && welcome.slices > 1)
      throw usage_error(fmt::format(
          "this job runs {} local ranks on some machine, so every machine must run a local "
          "collective (bps::local::host) to cut tensors into the same slices; this worker uses "
          "bps::local::none",
          welcome.slices));
    control_.on_failure([this](const std::string& why) {
      std::lock_guard lock(mu_);
      die_locked(why);
    });
    if (cfg_.failover()) failover_ = std::make_unique<detail::timer_thread>();
    for (std::size_t i = 0; i < welcome.servers.size(); ++i) {
      const auto& a = welcome.servers[i];
      server_link s;
      s.address = fmt::format("{}:{}", a.host, a.port);
      try {
        s.link = transport_.connect(a.host, a.port, cfg_.connect_timeout);
      } catch (const communicator_error& e) {
        throw communicator_error(fmt::format("cannot reach server {}: {}", i, e.what()));
      }
      std::lock_guard lock(mu_);
      start_server_link(s.link, static_cast<int>(i), 0);
      servers_.push_back(std::move(s));
    }
    if (failover_) {  // after the server table is complete; a notice that came earlier waits
      control_.on_notice(wire::msg::server_replaced,
                         [this](const rendezvous::frame& f) { on_server_replaced(f); });
    }
    const local::cluster machine{rank_,        num_workers_,   global_rank_,
                                 global_size_, welcome.slices, welcome.job_id};
    local_.attach(machine);
    if constexpr (!L::is_identity) stage_.start(machine);
    log_.info("joined: rank {} of {} workers on {} machines, {} servers", global_rank_,
              global_size_, num_workers_, servers_.size());
  }

  // Starts reading `link` (generation `generation` of server `server`) and says who we are.
  void start_server_link(const link_ptr& link, int server, std::uint64_t generation) {
    link->start(std::make_shared<server_receiver>(this, server, generation));
    wire::header h;
    h.type = wire::msg::peer_hello;
    h.sender = static_cast<std::uint32_t>(rank_);
    h.key = rendezvous::job_token_digest(cfg_.job_token);  // servers admit this job only
    link->send(h, {}, {});
  }

  void leave() {
    std::vector<link_ptr> links;
    {
      std::lock_guard lock(mu_);
      if (closing_) return;
      closing_ = true;
      if constexpr (!L::is_identity) stage_.close();
      for (auto& op : ops_.active())
        ops_.fail(op, std::make_exception_ptr(communicator_error(
                          op->what + ": the communicator was shut down before it finished")));
      if (dead_.empty())
        for (auto& s : servers_)
          if (s.up) links.push_back(s.link);
    }
    if (failover_) failover_->stop();  // a reconnect in progress ends first (closing_ is set)
    // Say bye so that servers and the scheduler know this exit is no failure; bounded wait.
    auto left = std::make_shared<std::atomic<int>>(static_cast<int>(links.size()) + 1);
    auto done = std::make_shared<std::promise<void>>();
    auto one_left = [left, done] {
      if (left->fetch_sub(1) == 1) done->set_value();
    };
    wire::header bye;
    bye.type = wire::msg::bye;
    for (auto& l : links) l->send(bye, {}, one_left);
    control_.bye(one_left);
    done->get_future().wait_for(std::chrono::seconds(5));
    transport_.stop();
  }

  static void check_name(const char* op, std::string_view name) {
    if (name.empty())
      throw usage_error(fmt::format("{}: the tensor name is empty; give every tensor a unique, "
                                    "non-empty name",
                                    op));
  }

  void throw_if_dead_locked() const {
    if (closing_) throw usage_error("this communicator was shut down; create a new one");
    if (!dead_.empty()) throw communicator_error("this communicator is dead: " + dead_);
  }

  static void check_request(const std::string& what, void* data, std::size_t count, dtype type,
                            push_pull_options opts) {
    if (!dtype_from_wire(static_cast<std::uint32_t>(type)))
      throw usage_error(fmt::format("{}: dtype value {} is not one byteps carries (see "
                                    "bps::dtype)",
                                    what, static_cast<unsigned>(type)));
    if (data == nullptr && count != 0)
      throw usage_error(what + ": the data pointer is null but the count is " +
                        std::to_string(count));
    if (opts.average && !is_floating(type))
      throw usage_error(fmt::format("{}: average is defined for floating dtypes only, and the "
                                    "tensor is {}",
                                    what, dtype_name(type)));
  }

  // The push and pull of `data` (the caller's buffer, or a local collective's slice in host
  // memory), bounded by `deadline`.
  handle start(std::string name, std::string what, void* data, std::size_t count, dtype type,
               push_pull_options opts, clock::time_point deadline) {
    check_request(what, data, count, type, opts);
    const std::size_t bytes = count * dtype_size(type);
    auto op = std::make_shared<detail::op_state>();
    op->what = std::move(what);
    op->data = {static_cast<std::byte*>(data), bytes};
    op->type = type;
    op->average = opts.average && global_size_ > 1;
    op->key = tensor_key(name);
    op->deadline = deadline;
    op->on_deadline = [this](detail::op_state& o) { expire(o); };

    std::lock_guard lock(mu_);
    throw_if_dead_locked();
    worker::tensor& t = ops_.begin(op, std::move(name), count, partitioner_, servers_.size());
    if (cfg_.failover() && t.kept.size() != t.parts.size()) t.kept.resize(t.parts.size());
    if (t.parts.empty()) {
      op->released = true;
      op->finish(nullptr);
      return handle(op);
    }
    t.active = op;
    trace_.begin(*op, t.name, t.round, t.parts.size());  // timeline
    op->unanswered = t.parts.size();
    const std::uint64_t order = order_++;
    for (std::uint32_t i = 0; i < t.parts.size(); ++i) {
      const auto& p = t.parts[i];
      const int server = placement_.server_for(op->key, i);
      ops_.await(key_id{op->key, i}, worker::pending_part{op, p.offset, p.bytes, server, t.round});
      scheduler_.push(send_task{op->key, i, opts.priority, order, p.bytes, nullptr});
    }
    dispatch_locked();
    return handle(op);
  }

  // A push_pull or broadcast with several processes per machine: the local stage's pipeline,
  // whose network stage calls `start` for the slices this process sends.
  handle start_local(std::string name, std::string what, void* data, std::size_t count,
                     dtype type, push_pull_options opts, bool contributes)
    requires(!L::is_identity)
  {
    check_request(what, data, count, type, opts);
    {
      std::lock_guard lock(mu_);
      throw_if_dead_locked();
    }
    local::work w;
    w.name = std::move(name);
    w.what = std::move(what);
    w.data = data;
    w.count = count;
    w.type = type;
    w.opts = opts;
    w.contributes = contributes;
    w.deadline = clock::now() + cfg_.op_timeout;
    return stage_.submit(std::move(w));
  }

  // Ends the local stage's thread (failing what it still runs), then frees the policy's
  // resources.
  void stop_local() {
    if constexpr (!L::is_identity) stage_.stop();
    local_.shutdown();
  }

  void dispatch_locked() {
    while (auto task = scheduler_.pop()) {
      auto* waiting = ops_.awaiting(key_id{task->key, task->part});
      if (waiting == nullptr || waiting->op->failure || !dead_.empty()) {
        scheduler_.sent(task->bytes);  // its operation failed meanwhile: nothing to send
        continue;
      }
      worker::pending_part& p = *waiting;
      worker::tensor& t = ops_.at(task->key);
      p.dispatched = true;
      if (!servers_[static_cast<std::size_t>(p.server)].up) {
        scheduler_.sent(task->bytes);  // failover: re-sent to the replacement
        continue;
      }
      declare_locked(t, task->key, p.server);
      ++p.op->in_transport;
      trace_.dispatched(*p.op, task->part, p.server);  // timeline
      servers_[static_cast<std::size_t>(p.server)].link->send(
          push_header(t, task->key, task->part, p), p.op->data.subspan(p.offset, p.bytes),
          [this, op = p.op, bytes = p.bytes, part = task->part] {
            trace_.sent(*op, part);  // timeline
            sent(op, bytes);
          });
    }
  }

  // Sends tensor `key`'s name to `server` before its first partition there.
  void declare_locked(worker::tensor& t, std::uint64_t key, int server) {
    if (t.declared[static_cast<std::size_t>(server)]) return;
    t.declared[static_cast<std::size_t>(server)] = true;
    wire::header d;
    d.type = wire::msg::declare;
    d.sender = static_cast<std::uint32_t>(rank_);
    d.key = key;
    // t.name lives as long as the communicator
    servers_[static_cast<std::size_t>(server)].link->send(d, wire::as_bytes(t.name), {});
  }

  wire::header push_header(const worker::tensor& t, std::uint64_t key, std::uint32_t part,
                           const worker::pending_part& p) const {
    wire::header h;
    h.type = wire::msg::push;
    h.sender = static_cast<std::uint32_t>(rank_);
    h.key = key;
    h.part = part;
    h.dtype = static_cast<std::uint32_t>(t.type);
    h.round = p.round;
    h.tensor_bytes = t.bytes;
    h.offset = p.offset;
    if (p.op->trace) h.flags = wire::flag_traced;  // timeline: the server traces it too
    return h;
  }

  void sent(const op_ptr& op, std::size_t bytes) {
    std::lock_guard lock(mu_);
    scheduler_.sent(bytes);
    --op->in_transport;
    ops_.release_if_done(op);
    if (!closing_) dispatch_locked();
  }

  // I/O thread: where an answer lands. Marks the operation as being written into.
  std::span<std::byte> answer_destination(const wire::header& h, op_ptr& receiving) {
    std::lock_guard lock(mu_);
    auto* waiting = ops_.awaiting(key_id{h.key, h.part});
    if (waiting == nullptr) return {};
    worker::pending_part& p = *waiting;
    if (p.round != h.round || p.bytes != h.payload_bytes || p.op->failure) return {};
    if (!cfg_.failover()) {
      ++p.op->receiving;
      receiving = p.op;
      return p.op->data.subspan(p.offset, p.bytes);
    }
    if (p.receiving) return {};  // an old link still writes it (cannot happen: we wait for it)
    worker::kept_sum& kept = ops_.at(h.key).kept[h.part];
    p.receiving = true;
    kept.valid = false;
    kept.bytes.resize(p.bytes);
    ++p.op->receiving;
    receiving = p.op;
    return kept.bytes;
  }

  void answered(const wire::header& h, op_ptr op, std::span<std::byte> payload) {
    trace_.answered(*op, h.part);  // timeline
    if (cfg_.failover()) return answered_kept(h, std::move(op), payload);
    if (op->average && !op->failure)
      reduce::scale(payload.data(), payload.size() / dtype_size(op->type), op->type,
                    1.0 / global_size_);
    std::lock_guard lock(mu_);
    --op->receiving;
    ops_.answered(key_id{h.key, h.part}, op);
  }

  void server_error(int server, std::uint64_t generation, const wire::header& h,
                    const std::string& text) {
    std::lock_guard lock(mu_);
    auto& slot = servers_[static_cast<std::size_t>(server)];
    if (generation != slot.generation) return;  // from a server already replaced
    if (h.flags & wire::flag_fatal) {
      if (!cfg_.failover())
        return die_locked(fmt::format("server {} at {}: {}", server, slot.address, text));
      // Failover: a server that gave up (it lost the scheduler, or a worker) is lost to us; the
      // scheduler either replaces it or fails the job (naming the real cause).
      if (slot.up && dead_.empty() && !closing_) {
        server_down_locked(server, "it reported: " + text);
        slot.link->close();
      }
      return;
    }
    auto* t = ops_.find_tensor(h.key);
    if (t == nullptr || !t->active) return;
    ops_.fail(t->active,
              std::make_exception_ptr(usage_error(fmt::format("{}: {}", t->active->what, text))));
  }

  void server_closed(int server, std::uint64_t generation, op_ptr receiving, key_id id,
                     const std::string& reason) {
    std::lock_guard lock(mu_);
    if (receiving) {
      if (auto* p = ops_.awaiting(id); p != nullptr && p->op == receiving) p->receiving = false;
      --receiving->receiving;
      ops_.release_if_done(receiving);
    }
    auto& slot = servers_[static_cast<std::size_t>(server)];
    if (generation == slot.generation) {
      slot.link_closed = true;
      links_cv_.notify_all();
    }
    if (closing_ || !dead_.empty()) return;
    if (!cfg_.failover())
      return die_locked(fmt::format("lost server {} at {}: {}", server, slot.address, reason));
    if (generation == slot.generation && slot.up) server_down_locked(server, reason);
  }

  // A handle's deadline passed: name what the operation still waits for, then give up on the
  // whole communicator (its servers' state for that round is unknown).
  void expire(detail::op_state& o) {
    std::lock_guard lock(mu_);
    if (o.released || !dead_.empty()) return;
    auto waiting = ops_.unanswered_by_server(o, servers_.size());
    std::string detail;
    for (std::size_t s = 0; s < waiting.size(); ++s)
      if (waiting[s] != 0)
        detail += fmt::format("{}{} partition(s) from server {} at {}{}",
                              detail.empty() ? "" : ", ", waiting[s], s, servers_[s].address,
                              servers_[s].up ? "" : " (lost; its replacement had not come)");
    die_locked(fmt::format("{} did not finish within {} ms (BYTEPS_OP_TIMEOUT_MS); still waiting "
                           "for {}. A worker may not have called it, or a node is stuck.",
                           o.what, cfg_.op_timeout.count(),
                           detail.empty() ? std::string("its sends") : detail));
  }

  void die_locked(const std::string& why) {
    if (!dead_.empty() || closing_) return;
    dead_ = why;
    log_.error("{}", why);
    for (auto& op : ops_.active()) {
      // The operation whose deadline passed is named at the start of `why` already.
      auto text = why.starts_with(op->what) ? why : op->what + ": " + why;
      ops_.fail(op, std::make_exception_ptr(communicator_error(text)));
    }
    // Closing the links returns every payload the transport still holds (their on_sent run).
    for (auto& s : servers_) s.link->close();
    if constexpr (!L::is_identity) stage_.fail(why);
  }

  Config cfg_;
  T transport_;  // first: the links below need its I/O context
  rendezvous::client<T> control_;
  logger log_;
  L local_;
  P partitioner_;
  server_placement placement_;
  mutable std::mutex mu_;
  S scheduler_;
  std::vector<server_link> servers_;
  worker::op_table ops_;
  std::string dead_;
  bool closing_ = false;
  std::uint64_t order_ = 0;
  std::uint64_t barriers_ = 0;
  int rank_ = 0;  // the machine
  int num_workers_ = 1;
  int global_rank_ = 0;
  int global_size_ = 1;
  std::uint64_t job_id_ = 0;
  worker::local_stage_for<L> stage_;  // after the members its callbacks use
  std::condition_variable links_cv_;  // a server link reported on_close (with mu_)
  std::uint64_t replacement_notices_ = 0;  // server_replaced notices so far
  detail::tracer trace_;  // timeline: null when BYTEPS_TRACE_ON=0
  // Failover only: runs reconnects and the replacement deadlines. Last: stops first.
  std::unique_ptr<detail::timer_thread> failover_;

  // Failover: worker/impl/failover.hpp.
  void answered_kept(const wire::header& h, op_ptr op, std::span<std::byte> payload);
  void server_down_locked(int server, const std::string& reason);
  void replacement_overdue(int server, std::uint64_t generation);
  void on_server_replaced(const rendezvous::frame& f);
  void reconnect(int server, const rendezvous::address& where, std::uint64_t notice);
  std::pair<std::size_t, std::size_t> resend_locked(int server);
  void repushed(const op_ptr& op);
};

}  // namespace bps

#include "byteps/worker/impl/failover.hpp"
