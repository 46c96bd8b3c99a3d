#pragma once
/// @file
/// The embedding-table calls of `worker::node` (worker/node.hpp): `declare_table`, `pull_rows`,
/// `push_rows`, `save_table` and `load_table` made into requests (worker/row_calls.hpp) and sent to the servers, each call
/// one operation record with the worker's deadline. Included at the end of worker/node.hpp.

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "byteps/embedding/checkpoint.hpp"
#include "byteps/embedding/optimizer.hpp"
#include "byteps/embedding/table_spec.hpp"
#include "byteps/worker/node.hpp"
#include "byteps/worker/row_calls.hpp"

namespace bps::worker {

template <class T, class L, class P, class S>
void node<T, L, P, S>::declare_table(const table_spec& spec) {
  // A table's synchronous rounds count every process of the job: not with workers that leave.
  if (cfg_.elastic())
    throw usage_error(fmt::format(
        "declare_table of '{}': embedding tables do not work with elastic training "
        "(BYTEPS_MIN_NUM_WORKER or BYTEPS_MAX_NUM_WORKER set) yet",
        spec.name));
  embedding::check_spec(spec);
  embedding::optimizer::parse(spec.optimizer, spec.name);  // throws for a recipe no server reads
  std::shared_ptr<detail::op_state> op;
  {
    std::lock_guard lock(state_.mu);
    state_.life.throw_if_gone({});
    if (!state_.rows.declare(spec)) return;  // declared alike before
    auto& t = state_.rows.at(spec.name, "declare_table");
    op = row_operation(fmt::format("declare_table of '{}'", spec.name));
    ask_every_server(op, t, embedding::encode_declare(spec), {});
  }
  deadlines_.watch(op);
  try {
    handle(op).wait();
  } catch (...) {
    std::lock_guard lock(state_.mu);
    state_.rows.forget(spec.name);  // so that a corrected declaration is sent again
    throw;
  }
}

template <class T, class L, class P, class S>
handle node<T, L, P, S>::pull_rows(std::string_view name, std::span<const std::uint64_t> ids,
                                   void* rows, std::size_t count, dtype type) {
  std::unique_lock lock(state_.mu);
  state_.life.throw_if_gone({});
  auto& t = state_.rows.at(name, "pull_rows");
  row_calls::check(t, "pull_rows", ids, count, type);
  if (rows == nullptr && count != 0)
    throw usage_error(fmt::format("pull_rows of table '{}': the rows pointer is null", name));
  auto op = row_operation(fmt::format("pull_rows of table '{}'", name));
  auto requests = row_calls::plan_pull(t, ids, static_cast<int>(state_.links.size()));
  check_frame_sizes(requests, t, "pull_rows");
  const auto round = state_.rows.next_call_round();
  for (auto& r : requests) {
    const int server = r.server;
    auto payload = std::make_shared<std::vector<std::byte>>(std::move(r.payload));
    state_.rows.await(op, t, round, std::move(r), payload, static_cast<std::byte*>(rows));
    send_rows(server, t, round, payload);
  }
  state_.rows.finish_if_done(op);  // no ids: done at once
  lock.unlock();
  deadlines_.watch(op);
  return handle(op);
}

template <class T, class L, class P, class S>
handle node<T, L, P, S>::push_rows(std::string_view name, std::span<const std::uint64_t> ids,
                                   const void* grads, std::size_t count, dtype type) {
  std::unique_lock lock(state_.mu);
  state_.life.throw_if_gone({});
  auto& t = state_.rows.at(name, "push_rows");
  row_calls::check(t, "push_rows", ids, count, type);
  if (grads == nullptr && count != 0)
    throw usage_error(fmt::format("push_rows of table '{}': the gradients pointer is null", name));
  if (t.push_in_flight && !t.push_in_flight->released)
    throw usage_error(fmt::format("push_rows of table '{}': the previous push_rows of this table "
                                  "is still in flight; wait on its handle first",
                                  name));
  auto op = row_operation(fmt::format("push_rows of table '{}'", name));
  auto requests = row_calls::plan_push(t, ids, static_cast<const std::byte*>(grads),
                                       static_cast<int>(state_.links.size()));
  check_frame_sizes(requests, t, "push_rows");
  const auto round = ++t.pushes;
  for (auto& r : requests) {
    const int server = r.server;
    auto payload = std::make_shared<std::vector<std::byte>>(std::move(r.payload));
    state_.rows.await(op, t, round, std::move(r), payload, nullptr);
    send_rows(server, t, round, payload);
  }
  t.push_in_flight = op;
  lock.unlock();
  deadlines_.watch(op);
  return handle(op);
}

template <class T, class L, class P, class S>
void node<T, L, P, S>::save_table(std::string_view name, const std::string& dir) {
  if (dir.empty() || dir.size() > embedding::max_dir_bytes)
    throw usage_error(fmt::format("save_table of '{}': the directory must have 1 to {} bytes",
                                  name, embedding::max_dir_bytes));
  std::shared_ptr<detail::op_state> op;
  std::vector<std::shared_ptr<std::vector<std::byte>>> summaries;
  table_spec spec;
  {
    std::lock_guard lock(state_.mu);
    state_.life.throw_if_gone({});
    auto& t = state_.rows.at(name, "save_table");
    spec = t.spec;
    op = row_operation(fmt::format("save_table of '{}'", name));
    for (std::size_t s = 0; s < state_.links.size(); ++s)
      summaries.push_back(
          std::make_shared<std::vector<std::byte>>(embedding::save_answer_bytes));
    ask_every_server(op, t, embedding::encode_checkpoint(embedding::op::save, dir), summaries);
  }
  deadlines_.watch(op);
  handle(op).wait();
  // Every shard is written: the manifest last, so that one that exists names whole files.
  std::vector<embedding::shard_summary> shards;
  std::vector<std::string> files;
  const int servers = static_cast<int>(summaries.size());
  for (int s = 0; s < servers; ++s) {
    const auto& b = *summaries[static_cast<std::size_t>(s)];
    shards.push_back({wire::detail::get_le<std::uint64_t>(b.data()),
                      wire::detail::get_le<std::uint64_t>(b.data() + 8),
                      wire::detail::get_le<std::uint64_t>(b.data() + 16)});
    const auto path = embedding::shard_file(dir, spec.name, s, servers);
    files.push_back(path.substr(path.rfind('/') + 1));
  }
  const auto manifest = embedding::manifest_file(dir, spec.name);
  std::ofstream out(manifest, std::ios::trunc);
  out << embedding::manifest_text(spec, shards, files);
  out.flush();
  if (!out)
    throw usage_error(fmt::format("save_table of '{}': cannot write the manifest {}: {}", name,
                                  manifest, std::strerror(errno)));
}

template <class T, class L, class P, class S>
void node<T, L, P, S>::load_table(std::string_view name, const std::string& dir) {
  {
    std::lock_guard lock(state_.mu);
    state_.rows.at(name, "load_table");  // an undeclared table is named before any file
  }
  // The manifest is read outside the worker's mutex: a file system may be slow.
  const int saved_by = embedding::manifest_servers(embedding::manifest_file(dir, std::string(name)));
  std::shared_ptr<detail::op_state> op;
  {
    std::lock_guard lock(state_.mu);
    state_.life.throw_if_gone({});
    auto& t = state_.rows.at(name, "load_table");
    if (saved_by != static_cast<int>(state_.links.size()))
      throw usage_error(fmt::format(
          "load_table of '{}': the checkpoint in {} was saved by {} servers, this job has {}; rows "
          "are placed by the server count, so a table loads into as many servers as saved it",
          name, dir, saved_by, state_.links.size()));
    op = row_operation(fmt::format("load_table of '{}'", name));
    ask_every_server(op, t, embedding::encode_checkpoint(embedding::op::load, dir), {});
  }
  deadlines_.watch(op);
  handle(op).wait();
}

template <class T, class L, class P, class S>
void node<T, L, P, S>::check_frame_sizes(const std::vector<row_request>& requests,
                                         const table_record& t, std::string_view what) const {
  const auto limit = cfg_.max_frame_bytes();
  for (const auto& r : requests) {
    const auto rows = wire::detail::get_le<std::uint64_t>(r.payload.data() + 8);  // count
    const std::size_t bytes = std::max<std::size_t>(r.payload.size(), rows * t.row_bytes);
    if (bytes > limit)
      throw usage_error(fmt::format(
          "{} of table '{}': the rows for server {} make a frame of {} bytes, more than a frame "
          "may carry ({} bytes: BYTEPS_PARTITION_BYTES + 1 MiB); pass fewer ids per call",
          what, t.spec.name, r.server, bytes, limit));
  }
}

template <class T, class L, class P, class S>
std::shared_ptr<detail::op_state> node<T, L, P, S>::row_operation(std::string what) {
  auto op = std::make_shared<detail::op_state>();
  op->what = std::move(what);
  op->deadline = clock::now() + cfg_.op_timeout;
  op->wait_poll = cfg_.wait_poll;
  op->on_deadline = [this](detail::op_state& o) { expire_rows(o); };
  return op;
}

template <class T, class L, class P, class S>
void node<T, L, P, S>::ask_every_server(
    const std::shared_ptr<detail::op_state>& op, const table_record& t,
    std::vector<std::byte> payload,
    const std::vector<std::shared_ptr<std::vector<std::byte>>>& answers) {
  const auto round = state_.rows.next_call_round();
  const auto shared = std::make_shared<std::vector<std::byte>>(std::move(payload));
  for (int s = 0; s < static_cast<int>(state_.links.size()); ++s) {
    row_request r;
    r.server = s;
    state_.rows.await(op, t, round, std::move(r), shared, nullptr,
                      answers.empty() ? nullptr : answers[static_cast<std::size_t>(s)]);
    send_rows(s, t, round, shared);
  }
}

template <class T, class L, class P, class S>
void node<T, L, P, S>::send_rows(int server, const table_record& t, std::uint64_t round,
                                 const std::shared_ptr<std::vector<std::byte>>& payload) {
  state_.links[server].link->send(rows_header(t.key, t.spec.type, round, state_.machine), *payload,
                                  [payload] {});
}

template <class T, class L, class P, class S>
void node<T, L, P, S>::expire_rows(detail::op_state& o) {
  std::lock_guard lock(state_.mu);
  if (o.released || state_.life.dead()) return;
  std::string waiting;
  for (int s : state_.rows.waiting_on(o))
    waiting += fmt::format("{}server {} at {}", waiting.empty() ? "" : ", ", s,
                           state_.links[s].address);
  state_.die_locked(fmt::format(
      "{} did not finish within {} ms (BYTEPS_OP_TIMEOUT_MS); still waiting for {}. A worker "
      "may not have called it (a push_rows round needs every worker's), or a node is stuck.",
      o.what, cfg_.op_timeout.count(), waiting.empty() ? std::string("its sends") : waiting));
}

}  // namespace bps::worker
