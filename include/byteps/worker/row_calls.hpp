#pragma once
/// @file
/// `bps::worker::row_calls`: a worker's embedding tables (the ones it declared) and its table
/// calls in flight. A call is one operation record (`detail::op_state`, so its handle, deadline
/// and failure are a push_pull's) and one request per server it asks: a pull asks the servers
/// that hold its rows, a push every server (a synchronous round needs every worker's push, an
/// empty one too). Each request's answer is written straight into the caller's rows (a pull)
/// or only counted (a push, a declare); the call finishes with its last answer.
///
/// How ids become requests: `plan_pull` and `plan_push` split a call's ids by server
/// (table/placement.hpp), each id once: a pull's duplicates are answered from one row, a push's
/// gradients for one id are summed first, in float32 in the call's order, then rounded to the
/// table's type once.
///
/// With failover on, each request's payload is kept until its answer, so that `resend` can
/// give a replacement server everything the dead one still owed answers for, after declaring
/// every table to it again (the replacement replays its journal then: server/tables.hpp).
///
/// Not thread-safe: the worker's mutex guards it, except where a function says otherwise.

#include <fmt/core.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/op_state.hpp"
#include "byteps/embedding/messages.hpp"
#include "byteps/embedding/placement.hpp"
#include "byteps/embedding/shard.hpp"
#include "byteps/embedding/table_spec.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::worker {

/// The header of a table call's request: `round` is a push's round or a call number.
inline wire::header rows_header(std::uint64_t key, dtype type, std::uint64_t round, int machine) {
  wire::header h;
  h.type = wire::msg::rows_request;
  h.sender = static_cast<std::uint32_t>(machine);
  h.key = key;
  h.dtype = static_cast<std::uint32_t>(type);
  h.round = round;
  return h;
}

/// A table this worker declared.
struct table_record {
  table_spec spec;
  std::uint64_t key = 0;
  std::size_t row_bytes = 0;
  std::uint64_t pushes = 0;  ///< push rounds so far
  std::shared_ptr<detail::op_state> push_in_flight;
};

/// One call's request to one server, before it is sent.
struct row_request {
  int server = 0;
  std::vector<std::byte> payload;  ///< table/messages.hpp's form
  /// A pull: for the k-th row it asks, where that row goes in the caller's rows (indices of
  /// ids), `positions[starts[k] .. starts[k + 1])`.
  std::vector<std::size_t> starts, positions;
};

class row_calls {
 public:
  using op_ptr = std::shared_ptr<detail::op_state>;

  /// Records `spec`; declaring a table again alike is allowed (false: nothing new to send), and
  /// differently a `usage_error`.
  bool declare(const table_spec& spec) {
    auto [it, fresh] = tables_.try_emplace(spec.name);
    if (!fresh) {
      if (const auto diff = embedding::first_difference(it->second.spec, spec); !diff.empty())
        throw usage_error(fmt::format(
            "declare_table of '{}': this worker declared it before with other values ({}: "
            "then, now)",
            spec.name, diff));
      return false;
    }
    it->second.spec = spec;
    it->second.key = embedding::table_key(spec.name);
    it->second.row_bytes = spec.dim * dtype_size(spec.type);
    return true;
  }

  /// Drops `name`'s record (its declaration failed).
  void forget(const std::string& name) { tables_.erase(name); }

  /// The table `name`, for call `what`; a `usage_error` when it was not declared.
  table_record& at(std::string_view name, std::string_view what) {
    auto it = tables_.find(std::string(name));
    if (it == tables_.end())
      throw usage_error(fmt::format("{} of table '{}': no such table was declared; call "
                                    "declare_table first",
                                    what, name));
    return it->second;
  }

  /// A fresh round number for a declare's or a pull's requests.
  std::uint64_t next_call_round() noexcept { return ++calls_ | embedding::call_round_bit; }

  /// Checks a call's arguments: each id in range, `count` elements of `type` for `ids`.
  static void check(const table_record& t, std::string_view what,
                    std::span<const std::uint64_t> ids, std::size_t count, dtype type) {
    if (type != t.spec.type)
      throw usage_error(fmt::format("{} of table '{}': the table holds {}, the call passes {}",
                                    what, t.spec.name, dtype_name(t.spec.type), dtype_name(type)));
    if (count != ids.size() * t.spec.dim)
      throw usage_error(fmt::format(
          "{} of table '{}': {} ids of dim {} need {} elements, the call passes {}", what,
          t.spec.name, ids.size(), t.spec.dim, ids.size() * t.spec.dim, count));
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (ids[i] >= t.spec.rows)
        throw usage_error(fmt::format(
            "{} of table '{}': row id {} (at index {}) is out of range (the table has {} rows)",
            what, t.spec.name, ids[i], i, t.spec.rows));
  }

  /// A pull's requests: one per server holding some of `ids`, each id once.
  static std::vector<row_request> plan_pull(const table_record& t,
                                            std::span<const std::uint64_t> ids, int servers) {
    std::vector<std::vector<std::uint64_t>> unique(static_cast<std::size_t>(servers));
    std::vector<std::vector<std::vector<std::size_t>>> where(unique.size());
    std::unordered_map<std::uint64_t, std::size_t> seen;  // id -> its index in its server's list
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto s = static_cast<std::size_t>(embedding::row_server(t.key, ids[i], servers));
      auto [it, fresh] = seen.try_emplace(ids[i], unique[s].size());
      if (fresh) {
        unique[s].push_back(ids[i]);
        where[s].emplace_back();
      }
      where[s][it->second].push_back(i);
    }
    std::vector<row_request> out;
    for (std::size_t s = 0; s < unique.size(); ++s) {
      if (unique[s].empty()) continue;
      row_request r;
      r.server = static_cast<int>(s);
      r.payload = embedding::request_buffer(embedding::op::pull, unique[s].size(), 0);
      put_ids(r.payload, unique[s]);
      r.starts.push_back(0);
      for (const auto& w : where[s]) {
        r.positions.insert(r.positions.end(), w.begin(), w.end());
        r.starts.push_back(r.positions.size());
      }
      out.push_back(std::move(r));
    }
    return out;
  }

  /// A push's requests: one per server (empty where it holds none of `ids`), each id once with
  /// its gradients summed.
  static std::vector<row_request> plan_push(const table_record& t,
                                            std::span<const std::uint64_t> ids,
                                            const std::byte* grads, int servers) {
    const std::size_t dim = t.spec.dim;
    std::vector<std::vector<std::uint64_t>> unique(static_cast<std::size_t>(servers));
    std::vector<std::vector<float>> sums(unique.size());
    std::unordered_map<std::uint64_t, std::size_t> seen;
    std::vector<float> g(dim);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto s = static_cast<std::size_t>(embedding::row_server(t.key, ids[i], servers));
      embedding::widen(grads + i * t.row_bytes, t.spec.type, g.data(), dim);
      auto [it, fresh] = seen.try_emplace(ids[i], unique[s].size());
      if (fresh) {
        unique[s].push_back(ids[i]);
        sums[s].insert(sums[s].end(), g.begin(), g.end());
      } else {
        float* sum = sums[s].data() + it->second * dim;
        for (std::size_t j = 0; j < dim; ++j) sum[j] = sum[j] + g[j];
      }
    }
    std::vector<row_request> out(unique.size());
    for (std::size_t s = 0; s < unique.size(); ++s) {
      auto& r = out[s];
      r.server = static_cast<int>(s);
      r.payload = embedding::request_buffer(embedding::op::push, unique[s].size(),
                                        unique[s].size() * t.row_bytes);
      put_ids(r.payload, unique[s]);
      embedding::narrow(sums[s].data(), t.spec.type,
                    r.payload.data() + embedding::request_head_bytes + 8 * unique[s].size(),
                    sums[s].size());
    }
    return out;
  }

  /// `op` awaits the answer to `r`, sent with `round` about table `t` as `payload`; `rows` is
  /// where a pull's rows go (null otherwise); `copy_to`, sized to the answer expected, where a
  /// save's summary goes (null otherwise). Any other answer is empty.
  void await(const op_ptr& op, const table_record& t, std::uint64_t round, row_request&& r,
             std::shared_ptr<std::vector<std::byte>> payload, std::byte* rows,
             std::shared_ptr<std::vector<std::byte>> copy_to = {}) {
    ++op->unanswered;
    awaited a;
    a.op = op;
    a.type = t.spec.type;
    a.order = ++requests_;
    if (keep_payloads_) a.payload = std::move(payload);
    a.row_bytes = t.row_bytes;
    a.rows = rows;
    a.starts = std::move(r.starts);
    a.positions = std::move(r.positions);
    const std::size_t rows_asked = a.starts.empty() ? 0 : a.starts.size() - 1;
    a.expect_bytes = copy_to ? copy_to->size() : rows_asked * t.row_bytes;
    a.copy_to = std::move(copy_to);
    awaited_.emplace(call_id{t.key, round, r.server}, std::move(a));
  }

  /// The I/O thread's part of an answer, under the worker's mutex: what it must write where,
  /// or nothing (`op` null) when no call awaits it any more. A size that is not the request's
  /// fails the call (a server that breaks the protocol).
  struct delivery {
    op_ptr op;
    std::byte* rows = nullptr;
    std::size_t row_bytes = 0;
    std::vector<std::size_t> starts, positions;
    std::shared_ptr<std::vector<std::byte>> copy_to;
  };
  delivery take(int server, const wire::header& h, std::size_t payload_bytes) {
    auto it = awaited_.find(call_id{h.key, h.round, server});
    if (it == awaited_.end()) {
      redeclared_.erase(call_id{h.key, h.round, server});
      return {};
    }
    auto& a = it->second;
    if (payload_bytes != a.expect_bytes) {
      auto op = a.op;
      fail(op, std::make_exception_ptr(communicator_error(
                   fmt::format("{}: server {} answered with {} bytes, expected {}", op->what,
                               server, payload_bytes, a.expect_bytes))));
      return {};
    }
    delivery d{a.op, a.rows, a.row_bytes, std::move(a.starts), std::move(a.positions),
               std::move(a.copy_to)};
    awaited_.erase(it);
    ++d.op->receiving;
    return d;
  }

  /// Outside the mutex: writes a pull's rows where the caller asked for them.
  static void write(const delivery& d, std::span<const std::byte> payload) {
    if (d.copy_to) std::memcpy(d.copy_to->data(), payload.data(), payload.size());
    if (d.rows == nullptr) return;
    for (std::size_t k = 0; k + 1 < d.starts.size(); ++k)
      for (std::size_t p = d.starts[k]; p < d.starts[k + 1]; ++p)
        std::memcpy(d.rows + d.positions[p] * d.row_bytes, payload.data() + k * d.row_bytes,
                    d.row_bytes);
  }

  /// Under the mutex again: the delivery is written.
  void delivered(const delivery& d) {
    --d.op->receiving;
    if (!d.op->failure) --d.op->unanswered;
    finish_if_done(d.op);
  }

  /// Failover on: payloads are kept until answered, for `resend`.
  void keep_payloads() noexcept { keep_payloads_ = true; }

  /// Failover: `server` was replaced. Declares every table again (with the push rounds begun,
  /// so a replacement without the dead server's journal can tell the rows are lost), then
  /// re-sends every request still awaited from it, in the order they were first made:
  /// `send(key, type, round, payload)`. Returns the requests re-sent.
  template <class Send>
  std::size_t resend(int server, Send&& send) {
    std::erase_if(redeclared_, [&](const auto& e) { return e.first.server == server; });
    for (const auto& [name, t] : tables_) {
      const auto round = next_call_round();
      redeclared_.emplace(call_id{t.key, round, server}, name);
      send(t.key, t.spec.type, round,
           std::make_shared<std::vector<std::byte>>(embedding::encode_declare(t.spec, t.pushes)));
    }
    std::vector<std::pair<const call_id*, const awaited*>> owed;
    for (const auto& [id, a] : awaited_)
      if (id.server == server && a.payload) owed.emplace_back(&id, &a);
    std::sort(owed.begin(), owed.end(),
              [](const auto& x, const auto& y) { return x.second->order < y.second->order; });
    for (const auto& [id, a] : owed) send(id->key, a->type, id->round, a->payload);
    return owed.size();
  }

  /// When `h` is the answer to a declaration `resend` sent, the worker's failure: a replacement
  /// that cannot take the table over (its journal is missing) leaves the job nothing to go on
  /// with.
  std::optional<std::string> redeclaration_refused(int server, const wire::header& h,
                                                   const std::string& text) {
    auto it = redeclared_.find(call_id{h.key, h.round, server});
    if (it == redeclared_.end()) return std::nullopt;
    auto why = fmt::format("server {}'s replacement refused table '{}': {}", server, it->second,
                           text);
    redeclared_.erase(it);
    return why;
  }

  /// A server refused the request `h` (a usage error of this call): the call fails with it.
  /// False when no call awaits that request.
  bool refused(int server, const wire::header& h, const std::string& text) {
    auto it = awaited_.find(call_id{h.key, h.round, server});
    if (it == awaited_.end()) return false;
    auto op = it->second.op;
    fail(op, std::make_exception_ptr(usage_error(fmt::format("{}: {}", op->what, text))));
    return true;
  }

  /// Fails `op`: its requests are no longer awaited; it finishes once no answer is being
  /// written into the caller's rows.
  void fail(const op_ptr& op, std::exception_ptr e) {
    if (op->released || op->failure) return;
    op->failure = std::move(e);
    for (auto it = awaited_.begin(); it != awaited_.end();)
      it = it->second.op == op ? awaited_.erase(it) : std::next(it);
    finish_if_done(op);
  }

  /// The worker died: every call in flight fails with `why`.
  void fail_all(const std::string& why) {
    std::vector<op_ptr> ops;
    for (auto& [id, a] : awaited_) ops.push_back(a.op);
    for (auto& op : ops) {
      auto text = why.starts_with(op->what) ? why : op->what + ": " + why;
      fail(op, std::make_exception_ptr(communicator_error(text)));
    }
  }

  /// The servers `op` still waits for, for a deadline's message.
  std::vector<int> waiting_on(const detail::op_state& op) const {
    std::vector<int> servers;
    for (const auto& [id, a] : awaited_)
      if (a.op.get() == &op) servers.push_back(id.server);
    return servers;
  }

  /// Calls in flight (`comm_stats`).
  std::size_t in_flight() const {
    std::vector<const detail::op_state*> ops;
    for (const auto& [id, a] : awaited_)
      if (std::find(ops.begin(), ops.end(), a.op.get()) == ops.end()) ops.push_back(a.op.get());
    return ops.size();
  }

  /// Finishes `op` when nothing is left to wait for or write (also a call with no requests).
  void finish_if_done(const op_ptr& op) {
    if (op->released || op->receiving != 0) return;
    if (!op->failure && op->unanswered != 0) return;
    op->released = true;
    op->finish(op->failure);
  }

 private:
  static void put_ids(std::vector<std::byte>& payload, std::span<const std::uint64_t> ids) {
    std::byte* p = payload.data() + embedding::request_head_bytes;
    for (std::size_t i = 0; i < ids.size(); ++i) wire::detail::put_le<std::uint64_t>(p + 8 * i, ids[i]);
  }

  struct call_id {
    std::uint64_t key = 0, round = 0;
    int server = 0;
    friend bool operator==(const call_id&, const call_id&) = default;
  };
  struct call_id_hash {
    std::size_t operator()(const call_id& c) const noexcept {
      return static_cast<std::size_t>(embedding::mix(c.key ^ embedding::mix(c.round) ^
                                                 static_cast<std::uint64_t>(c.server)));
    }
  };
  struct awaited {
    op_ptr op;
    dtype type = dtype::float32;
    std::uint64_t order = 0;                         ///< when the request was made
    std::shared_ptr<std::vector<std::byte>> payload;  ///< failover only: for `resend`
    std::size_t row_bytes = 0;
    std::byte* rows = nullptr;
    std::vector<std::size_t> starts, positions;
    std::size_t expect_bytes = 0;
    std::shared_ptr<std::vector<std::byte>> copy_to;
  };

  std::unordered_map<std::string, table_record> tables_;
  std::unordered_map<call_id, awaited, call_id_hash> awaited_;
  std::unordered_map<call_id, std::string, call_id_hash> redeclared_;  // resend's: table names
  std::uint64_t calls_ = 0, requests_ = 0;
  bool keep_payloads_ = false;
};

}  // namespace bps::worker
