#pragma once
/// @file
/// `bps::worker::shared_state<T, P, S>`: what the parts of a worker share under its one mutex:
/// the dispatcher (and through it the operation table), the links to the servers, the worker's
/// one failure flag (`liveness`, which its local stage reads too), and the facts of the job
/// they read. `worker::node` owns it and
/// hands it to the parts that read the servers' answers (`answers`) and survive a server's loss
/// (`failover`), so none of them reaches into another's members. `die_locked` is the worker's
/// one failure path.
///
/// @par Thread Safety
/// `mu` guards every member but the references, `life` (its own leaf lock) and the job's facts,
/// which are written once, while the worker joins, before any link or thread reads them.

#include <exception>
#include <functional>
#include <mutex>
#include <string>

#include "byteps/core/config.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/log.hpp"
#include "byteps/detail/tracer.hpp"
#include "byteps/worker/dispatcher.hpp"
#include "byteps/worker/liveness.hpp"
#include "byteps/worker/op_table.hpp"
#include "byteps/worker/row_calls.hpp"
#include "byteps/worker/server_links.hpp"

namespace bps::worker {

template <class T, class P, class S>
struct shared_state {
  using link_ptr = typename server_links<T>::link_ptr;

  shared_state(const Config& c, const logger& l, detail::tracer& t)
      : cfg(c), log(l), trace(t), dispatcher(c) {}
  shared_state(const shared_state&) = delete;
  shared_state& operator=(const shared_state&) = delete;

  const Config& cfg;
  const logger& log;
  detail::tracer& trace;  ///< the timeline: null when BYTEPS_TRACE_ON=0
  mutable std::mutex mu;
  worker::dispatcher<P, S> dispatcher;
  row_calls rows;  ///< the embedding tables declared, and their calls in flight
  server_links<T> links;
  liveness life;        ///< dead (why) or closing: the worker's one failure flag
  int machine = 0;      ///< this worker's rank among the machines
  int global_size = 1;  ///< every worker process of the job
  /// Wakes what else reads `life` (the local stage) once the worker failed; runs once, under
  /// `mu`.
  std::function<void()> also_fail;

  op_table& ops() noexcept { return dispatcher.ops(); }

  /// Under `mu`. The one failure path: every operation in flight fails with `why`, the servers
  /// are told and the links closed, once.
  void die_locked(const std::string& why) {
    if (!life.fail(why)) return;
    log.error("{}", why);
    for (auto& op : ops().active()) {
      // The operation whose deadline passed is named at the start of `why` already.
      auto text = why.starts_with(op->what) ? why : op->what + ": " + why;
      ops().fail(op, std::make_exception_ptr(communicator_error(text)));
    }
    rows.fail_all(why);
    links.say_failed(why);  // before the close: each server then names the cause
    links.close_all();
    if (also_fail) also_fail();
  }
};

}  // namespace bps::worker
