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
/// scheduler replaces it: see worker/failover.hpp for the protocol. Answers then pass beside a
/// kept copy per partition (two more copies of every tensor's bytes in memory).
///
/// This class is the public face: it checks arguments and names operations; the work is done by
/// `worker::node` (worker/node.hpp) and the parts it owns. This header declares it with the
/// policies only named (no Asio, no sockets); the bodies are in worker/impl/communicator.hpp,
/// included here in header-only mode. In compiled mode (`BYTEPS_COMPILED`, target
/// `byteps::compiled`) the instantiations of the shipped policies come from the library, and a
/// translation unit that builds a communicator of its own policies includes the bodies itself
/// (docs/architecture.md, "Compiled mode").
///
/// Each policy is checked against its concept (`Transport`, `LocalCollective`, `Partitioner`,
/// `Scheduler`) where the communicator is built, in the constructor.
///
/// @par Thread Safety
/// All member functions may be called from several threads. The caller's buffer must stay
/// alive and untouched until the operation's handle is done (also when it fails).

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "byteps/core/config.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/handle.hpp"
#include "byteps/core/membership.hpp"
#include "byteps/core/push_pull_options.hpp"
#include "byteps/local/fwd.hpp"
#include "byteps/partition/by_bytes.hpp"
#include "byteps/schedule/priority.hpp"
#include "byteps/embedding/table_spec.hpp"
#include "byteps/transport/fwd.hpp"
#include "byteps/worker/stats.hpp"

namespace bps {

namespace worker {
template <class T, class L, class P, class S>
class node;  // worker/node.hpp
}  // namespace worker

/// The defaults (`Communicator<>`): shared memory to a server on this host and TCP to the others
/// (`transport::standard`), one process per machine (`local::none`), partitions sized from the
/// tensor and the server count (`partition::by_bytes`), in call order within a credit
/// (`schedule::priority`; highest priority first with `BYTEPS_SCHEDULING_PRIORITY=1`).
template <class T = transport::standard, class L = local::none,
          class P = partition::by_bytes, class S = schedule::priority>
class Communicator {
 public:
  using transport_options = transport::options_t<T>;

  /// Joins the cluster: connects to the scheduler, waits for every node (at most
  /// `Config::rendezvous_timeout`), then connects to every server. The transport is built with
  /// `transport_options`, or without them with `T::options::from(cfg)` (the environment's).
  explicit Communicator(const Config& cfg);
  Communicator(const Config& cfg, const transport_options& options);
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  /// Leaves the job as `shutdown()` does; when destroyed by an exception leaving the scope it
  /// lives in, as `shutdown(failure)` does: the job failed, and every node says so.
  ~Communicator();

  /// Registers `memory` (a trainer's gradient arena) with the transport, so that RDMA sends
  /// pushes straight from it and writes answers straight into it, with no staging copy, and
  /// caches each tensor's answer place after the first round (no request per answer). The
  /// caller promises that `memory` stays valid until this communicator is destroyed, and that a
  /// tensor inside it keeps its place from call to call. (A tensor that moves anyway still gets
  /// exact answers, but its old place is written once more before the worker notices.) TCP
  /// ignores it. Any thread.
  void register_memory(std::span<std::byte> memory);

  /// Leaves the job: operations still in flight fail, servers and the scheduler are told this
  /// worker is done (so its exit is no failure), and later calls throw `usage_error`. The
  /// destructor does this too. Idempotent.
  void shutdown();

  /// Leaves the job after a failure: as `shutdown()`, but the bye carries `failure`, and the
  /// scheduler fails the job with it (naming this worker), so the scheduler, the servers and
  /// the other workers exit with an error instead of a success. Idempotent with `shutdown()`:
  /// the first call says bye.
  void shutdown(const std::string& failure);

  /// This process among all worker processes (machine-major), and their number.
  int rank() const noexcept;
  int size() const noexcept;
  /// Elastic training (`Config::elastic()`): call between steps, once per step on every worker,
  /// with no operation in flight. Returns the change in the job's workers since the last call
  /// (a worker machine lost or gone, or one that joined), from which on `rank()` and `size()`
  /// are the new ones; nullopt when nothing changed (always, without elastic training). Sums
  /// never wait for it: each answer is averaged by the processes it sums. Every worker sees a
  /// change at the same call (the workers agree on it through the scheduler), so a trainer that
  /// rescales its learning rate or batch there does so at the same step on all. While a worker
  /// joins the running job, every worker holds at that call until it joined (at most
  /// BYTEPS_OP_TIMEOUT_MS). On a worker that joined, the first
  /// call loads the job's state (`register_state`, `on_state`) and returns an event naming its
  /// own machine in `joined`. See docs/reliability.md, "Elastic training".
  std::optional<membership_event> step_boundary();

  /// Elastic training: `data` is part of what a worker joining the running job is given. At
  /// the boundary it joins at, one worker's registered tensors are copied, by name, into the
  /// newcomer's (registered before its first `step_boundary()`). Every worker registers the
  /// same names and sizes. Throws `usage_error` for a name registered twice.
  template <element_type E>
  void register_state(std::string name, std::span<E> data) {
    static_assert(!std::is_const_v<E>, "register_state: the joining worker writes into it");
    register_state_bytes(std::move(name), std::as_writable_bytes(data));
  }
  void register_state_bytes(std::string name, std::span<std::byte> data);
  /// Elastic training: bytes of the trainer's own for a worker joining the running job (its
  /// step, epoch, optimizer or RNG state): `save` runs on the worker that sends the state, on
  /// its thread inside `step_boundary()`; `load` on the newcomer's, in its first
  /// `step_boundary()`, after the registered tensors were copied.
  void on_state(std::function<std::vector<std::byte>()> save,
                std::function<void(std::span<const std::byte>)> load);
  /// Elastic training: this worker joined a job that was already running (its first
  /// `step_boundary()` loads the job's state).
  bool joined_running_job() const;

  /// This machine (DMLC_WORKER_ID) and the number of machines (DMLC_NUM_WORKER).
  int machine() const noexcept;
  int machines() const noexcept;
  /// Random per job, the same on every node: names what the job keeps outside the process
  /// (shared-memory segments are /dev/shm/bps-<job id as 16 hex digits>-...).
  std::uint64_t job_id() const noexcept;
  int local_rank() const noexcept;
  int local_size() const noexcept;

  /// Sums `data` over all workers, in place. Returns at once. In async mode
  /// (`Config::enable_async`) the first call for a tensor gives every worker rank 0's `data`
  /// (the servers' initial parameters); each later call pushes `data` as a delta that the
  /// servers add, and writes the parameters as they are after it into `data`, without waiting
  /// for the other workers (server/async_sum.hpp); `average` is refused.
  template <element_type E>
  handle push_pull(std::string_view name, std::span<E> data, push_pull_options opts = {}) {
    static_assert(!std::is_const_v<E>,
                  "push_pull writes the sum into the span: it cannot be const");
    return push_pull(name, data.data(), data.size(), dtype_v<E>, std::move(opts));
  }

  /// The type-erased form: `count` elements of `type` at `data`.
  handle push_pull(std::string_view name, void* data, std::size_t count, dtype type,
                   push_pull_options opts = {});

  /// Copies `root`'s `data` into every worker's `data`. Returns at once.
  template <element_type E>
  handle broadcast(std::string_view name, std::span<E> data, int root) {
    static_assert(!std::is_const_v<E>, "broadcast writes into the span: it cannot be const");
    return broadcast(name, data.data(), data.size(), dtype_v<E>, root);
  }

  handle broadcast(std::string_view name, void* data, std::size_t count, dtype type, int root);

  /// Declares an embedding table held by the servers (docs/tables.md): each row on the server
  /// its id hashes to, updated there by `spec.optimizer` from the gradients every worker pushes.
  /// Every worker declares the same table (a server refuses a declaration that differs from
  /// another worker's, naming the field); declaring it again alike does nothing. Blocks until
  /// every server holds it, at most `Config::op_timeout`. Every worker process takes part, also
  /// with several per machine. With server failover on, the servers journal it for their
  /// replacements (`BYTEPS_TABLE_JOURNAL_DIR`, docs/tables.md).
  void declare_table(const table_spec& spec);

  /// Writes rows `ids` of table `table` into `rows` (`ids.size() * dim` elements, the table's
  /// type), row i at `rows[i * dim]`. Returns at once; `ids` may be reused then, `rows` must stay
  /// until the handle is done. An id asked twice is fetched once. A pull after a `push_rows`
  /// whose handle is done sees that round's update.
  template <element_type E>
  handle pull_rows(std::string_view table, std::span<const std::uint64_t> ids,
                   std::span<E> rows) {
    static_assert(!std::is_const_v<E>, "pull_rows writes the rows into the span: it cannot be const");
    return pull_rows(table, ids, rows.data(), rows.size(), dtype_v<E>);
  }
  handle pull_rows(std::string_view table, std::span<const std::uint64_t> ids, void* rows,
                   std::size_t count, dtype type);

  /// Pushes the gradients `grads` of rows `ids` of table `table` (`ids.size() * dim` elements,
  /// the table's type) as this worker's part of the table's next round; gradients of an id
  /// given twice are summed first. Every worker calls it once per round, with any ids (none
  /// too); when every worker's push is in, each server sums each row's gradients in rank order
  /// and applies the table's optimizer to it once, and every worker's handle completes. In async
  /// mode (`Config::enable_async`) each push is applied as it comes and answered at once, within
  /// `Config::async_staleness`. Returns at once; `ids` and `grads` may be reused then. One push
  /// of a table at a time.
  template <element_type E>
  handle push_rows(std::string_view table, std::span<const std::uint64_t> ids,
                   std::span<E> grads) {
    return push_rows(table, ids, grads.data(), grads.size(), dtype_v<E>);
  }
  handle push_rows(std::string_view table, std::span<const std::uint64_t> ids, const void* grads,
                   std::size_t count, dtype type);

  /// Saves table `table` into directory `dir` (docs/tables.md, "Checkpoints"): each server
  /// writes its shard's file there, then this worker the manifest. Call it on one worker,
  /// after its last `push_rows` handle is done: the files hold every round done by then. `dir`
  /// must exist and be the same path for the servers and this worker. Blocks, at most
  /// `Config::op_timeout`.
  void save_table(std::string_view table, const std::string& dir);

  /// Makes table `table`'s rows and optimizer state those `save_table` wrote into `dir`. Every
  /// worker calls it after `declare_table` (with the declaration saved) and before its first
  /// `pull_rows` or `push_rows`; a job with as many servers as saved it. Blocks, at most
  /// `Config::op_timeout`; a missing, damaged or foreign file is a `usage_error` naming it.
  void load_table(std::string_view table, const std::string& dir);

  /// The learning rate the trainer uses from now on, for error-feedback compressors
  /// (`ef_...`): the error kept from a round is scaled by the previous rate over this one, as
  /// BytePS does, so call it whenever the rate changes (each step under a schedule, or once at
  /// the start), between steps. Every compressor of this worker gets it before its next encode.
  /// Throws `usage_error` unless `lr` is positive and finite.
  void set_learning_rate(double lr);

  /// Throws `communicator_error` (naming the dead node and why) if the cluster has failed, even
  /// with no operation in flight: a trainer can call it between steps.
  void throw_if_failed() const;

  /// This worker's communication over the last 10 s: throughput over the time operations were
  /// in flight, in total and per tensor; mean time per stage; bytes per server; operations in
  /// flight now (worker/stats.hpp).
  comm_stats stats();

  /// Blocks until every worker called barrier, at most `Config::op_timeout`.
  void barrier();

 private:
  std::unique_ptr<worker::node<T, L, P, S>> node_;
  int unwinding_at_birth_ = std::uncaught_exceptions();  // exceptions in flight when built
};

}  // namespace bps

#if defined(BYTEPS_COMPILED)
#include "byteps/worker/communicator_instances.hpp"
#else
#include "byteps/worker/impl/communicator.hpp"
#endif
