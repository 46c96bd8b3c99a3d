#pragma once
/// @file
/// `server::tables`: the embedding tables' shards an engine holds (table/shard.hpp), and what a
/// server does with a `rows_request`: a declare makes the table's shard (or checks that a
/// worker declares what the others did), a pull is answered at once with the rows, a save writes
/// the shard's checkpoint file and a load reads it (embedding/checkpoint.hpp), and a push
/// waits, as a dense push does, until every worker pushed the round; then the optimizer runs
/// and every worker is answered. In asynchronous training a push is applied as it comes, with
/// the staleness bound dense pushes have. With failover on, every change is journaled before it
/// is answered (embedding/journal.hpp), and a replacement server replays the dead one's journal
/// when the workers declare the table to it again; a re-sent push that the journal holds is
/// answered as done. The outcomes are the handler's vocabulary (handler.hpp), so the
/// server carries them out with the same waiting rooms, stall reports and failures.
///
/// Not thread-safe: an engine owns it, as it owns its handler.

#include <fmt/core.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "byteps/core/error.hpp"
#include "byteps/server/handler.hpp"
#include "byteps/embedding/checkpoint.hpp"
#include "byteps/embedding/journal.hpp"
#include "byteps/embedding/messages.hpp"
#include "byteps/embedding/optimizer.hpp"
#include "byteps/embedding/placement.hpp"
#include "byteps/embedding/shard.hpp"
#include "byteps/wire/codec.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::server {

class tables {
 public:
  /// Where this server stands: its rank among `servers`, and the job's workers.
  struct place {
    int server = 0;
    int servers = 1;
    int num_workers = 1;  ///< worker processes (the welcome's global size): a round's pushes
    bool async = false;   ///< `BYTEPS_ENABLE_ASYNC`: a push is applied as it comes
    std::int64_t staleness = -1;  ///< `BYTEPS_ASYNC_STALENESS` (async): -1 unbounded
    bool failover = false;        ///< `Config::failover()`: changes are journaled
    std::string_view journal_dir{};  ///< `BYTEPS_TABLE_JOURNAL_DIR`
    std::uint64_t job_id = 0;      ///< the welcome's: names the journal files
  };

  /// Who sent a request: its machine (`DMLC_WORKER_ID`) and local rank.
  struct sender {
    int machine = 0;
    int local_rank = 0;
    std::uint32_t process() const noexcept { return embedding::process_id(machine, local_rank); }
    std::string describe() const {
      return local_rank == 0 ? fmt::format("worker {}", machine)
                             : fmt::format("worker {} local rank {}", machine, local_rank);
    }
  };

  /// A `rows_request` from `worker`. Throws `wire::decode_error` for a payload that is
  /// not a request (the server answers it with an error saying so).
  outcome handle(const wire::header& h, std::span<const std::byte> payload, const sender& worker,
                 const place& at) {
    auto it = shards_.find(h.key);
    embedding::shard* s = it == shards_.end() ? nullptr : it->second.get();
    const auto req = embedding::decode_request(payload, s != nullptr ? s->row_bytes() : 0);
    if (req.what == embedding::op::declare) return declare(h, req, at);
    const auto what = fmt::format("{} of table {}", embedding::op_name(req.what),
                                  s != nullptr ? "'" + s->spec().name + "'"
                                               : fmt::format("key 0x{:016x}", h.key));
    if (s == nullptr)
      return outcome::refuse(fmt::format("{}: server {} holds no such table; every worker calls "
                                         "declare_table before its first pull_rows or push_rows",
                                         what, at.server));
    for (std::uint64_t i = 0; i < req.count; ++i) {
      const auto id = req.id(i);
      if (id >= s->spec().rows)
        return outcome::refuse(fmt::format("{}: row id {} is out of range (the table has {} rows)",
                                           what, id, s->spec().rows));
      if (embedding::row_server(h.key, id, at.servers) != at.server)
        return outcome::refuse(fmt::format("{}: row id {} belongs to server {}, not server {}",
                                           what, id, embedding::row_server(h.key, id, at.servers),
                                           at.server));
    }
    if (req.what == embedding::op::save) return save(h, *s, req.dir, at);
    if (req.what == embedding::op::load) return load(h, *s, req.dir, at);
    if (req.what == embedding::op::pull) {
      auto rows = std::make_shared<std::vector<std::byte>>(req.count * s->row_bytes());
      for (std::uint64_t i = 0; i < req.count; ++i)
        s->read(req.id(i), rows->data() + i * s->row_bytes());
      reply r;
      r.bytes = *rows;
      r.round = h.round;
      r.type = s->spec().type;
      r.keep = std::move(rows);
      return outcome::answer_now(std::move(r));
    }
    if (at.async) return push_now(h, *s, req, worker, at, what);
    reply r;
    r.round = h.round;
    r.type = s->spec().type;
    // Failover: a push re-sent to a replacement whose journal holds its round already.
    if (at.failover && h.round + 1 == s->round()) return outcome::answer_now(r);
    if (h.round != s->round())
      return outcome::refuse(fmt::format(
          "{}: {} pushes round {}, but the table is at round {}: every worker calls "
          "push_rows on a table the same number of times, one at a time",
          what, worker.describe(), h.round, s->round()));
    if (s->pushed(worker.process()))
      return outcome::refuse(
          fmt::format("{}: {} pushed round {} twice", what, worker.describe(), h.round));
    s->add_push(worker.process(), req.ids, req.values, req.count);
    if (!s->round_complete()) return outcome::wait();
    const auto changed = s->apply_round();
    if (auto failed = journal_change(h.key, *s, changed, {}, at); !failed.empty())
      return outcome::fail_round(fmt::format("{}: {}", what, failed));  // every pusher hears it
    return outcome::release(r);
  }

  /// The job ended well: no replacement will need the journals.
  void remove_journals() {
    for (auto& [key, j] : journals_) j.remove();
    journals_.clear();
  }

  /// Bytes of rows and optimizer state held, over every table.
  std::size_t bytes() const {
    std::size_t n = 0;
    for (const auto& [key, s] : shards_) n += s->bytes();
    return n;
  }
  std::size_t count() const noexcept { return shards_.size(); }
  /// Rows held, over every table.
  std::size_t rows_held() const {
    std::size_t n = 0;
    for (const auto& [key, s] : shards_) n += s->rows_held();
    return n;
  }

 private:
  // `req.count` is how many push_rows rounds the declaring worker began: above 0 only when it
  // declares the table again to a replacement server, which must then have a journal.
  outcome declare(const wire::header& h, const embedding::request& req, const place& at) {
    const auto& spec = req.spec;
    reply done;
    done.round = h.round;
    done.type = spec.type;
    if (embedding::table_key(spec.name) != h.key)
      return outcome::refuse(fmt::format("declare_table of '{}': the frame's key 0x{:016x} is not "
                                         "the table's",
                                         spec.name, h.key));
    if (auto it = shards_.find(h.key); it != shards_.end()) {
      const auto diff = embedding::first_difference(it->second->spec(), spec);
      if (diff.empty()) return outcome::answer_now(done);
      return outcome::refuse(fmt::format(
          "declare_table of '{}': another worker declared it differently ({}: theirs, then "
          "this worker's); every worker declares a table alike",
          spec.name, diff));
    }
    try {
      embedding::check_spec(spec);
      auto opt = embedding::optimizer::parse(spec.optimizer, spec.name);
      auto s = std::make_unique<embedding::shard>(spec, opt, at.num_workers);
      if (at.failover) start_journal(h.key, *s, req.count, at);
      shards_.emplace(h.key, std::move(s));
    } catch (const usage_error& e) {
      journals_.erase(h.key);
      progress_.erase(h.key);
      loaded_from_.erase(h.key);
      return outcome::refuse(e.what());
    }
    return outcome::answer_now(done);
  }

  // Failover: the table's journal, replayed into `s` first when a dead server of this rank left
  // one (this server replaces it). Throws `usage_error` saying what is wrong.
  void start_journal(std::uint64_t key, embedding::shard& s, std::uint64_t pushes_begun,
                     const place& at) {
    const auto& name = s.spec().name;
    if (at.journal_dir.empty())
      throw usage_error(fmt::format(
          "declare_table of '{}': server failover is on (BYTEPS_FAILOVER_TIMEOUT_MS), and server "
          "{} has no BYTEPS_TABLE_JOURNAL_DIR; set it on every server and standby to a directory "
          "they all reach (the same machine, or a shared file system): each server journals its "
          "table shards there, and a replacement replays them",
          name, at.server));
    const std::string dir(at.journal_dir);
    const auto path = embedding::journal::file(dir, name, at.job_id, at.server, at.servers);
    embedding::journal j(path, s.spec(), at.job_id, at.server, at.servers);
    if (std::filesystem::exists(path)) {
      auto& p = progress_[key];
      try {
        for (auto& rec : embedding::journal::read(path, s.spec(), at.job_id, at.server,
                                                  at.servers)) {
          if (rec.what == embedding::journal_record::kind::snapshot) {
            s.restore(rec.rows);
            p.pushes = std::move(rec.pushes);
            if (!rec.loaded.empty()) loaded_from_[key] = rec.loaded;
          } else {
            s.merge(rec.rows);
            for (const auto& [process, n] : rec.pushes) p.pushes[process] = n;
          }
          s.set_round(rec.round);
        }
      } catch (const wire::decode_error& e) {
        throw usage_error(fmt::format("declare_table of '{}': the journal {} is malformed: {}",
                                      name, path, e.what()));
      }
    } else if (pushes_begun > 0) {
      throw usage_error(fmt::format(
          "declare_table of '{}' to server {}, which replaced a dead one: a worker pushed {} "
          "round(s) to the table, but no journal of it is in {} (BYTEPS_TABLE_JOURNAL_DIR), so "
          "its rows there are lost; a replacement must reach the directory the dead server "
          "journaled to (the same machine, or a shared file system)",
          name, at.server, pushes_begun, dir));
    }
    try {
      j.start(snapshot(key, s));
    } catch (const usage_error& e) {
      throw usage_error(fmt::format("declare_table of '{}': {}", name, e.what()));
    }
    journals_.insert_or_assign(key, std::move(j));
  }

  embedding::journal_record snapshot(std::uint64_t key, const embedding::shard& s) const {
    embedding::journal_record rec;
    rec.what = embedding::journal_record::kind::snapshot;
    rec.round = s.round();
    if (auto it = progress_.find(key); it != progress_.end()) rec.pushes = it->second.pushes;
    if (auto it = loaded_from_.find(key); it != loaded_from_.end()) rec.loaded = it->second;
    rec.rows = s.serialise();
    return rec;
  }

  // Failover: journals the rows `changed` (and, in asynchronous training, `pushes`: the pushing
  // worker's count) before anyone is answered; a fresh snapshot when the changes outweigh the
  // last. Returns what failed, or nothing. A journal that missed a change is removed: a
  // replacement then refuses the table, naming the lost rows, instead of replaying it.
  std::string journal_change(std::uint64_t key, const embedding::shard& s,
                             const std::vector<std::uint64_t>& changed,
                             std::map<std::uint32_t, std::uint64_t> pushes, const place& at) {
    auto it = journals_.find(key);
    if (it == journals_.end()) return {};
    embedding::journal_record rec;
    rec.round = s.round();
    rec.pushes = std::move(pushes);
    rec.rows = s.serialise_rows(changed);
    try {
      if (it->second.append(rec)) it->second.start(snapshot(key, s));
    } catch (const usage_error& e) {
      it->second.remove();
      journals_.erase(it);
      return fmt::format("server {} could not journal the change, so a replacement could not "
                         "recover it (the journal is removed): {}",
                         at.server, e.what());
    }
    return {};
  }

  // Asynchronous training: the push is applied at once, and its worker answered unless that
  // leaves it more than `staleness` pushes ahead of the slowest worker (as server/async_sum.hpp
  // bounds dense pushes): then it is held, and answered by the push that brings the slowest
  // close enough.
  outcome push_now(const wire::header& h, embedding::shard& s, const embedding::request& req,
                   const sender& worker, const place& at, const std::string& what) {
    auto& p = progress_[h.key];
    auto& mine = p.pushes[worker.process()];
    // Failover: a push re-sent to a replacement whose journal holds it already is not applied
    // again, only answered (or held) as it would have been.
    const bool applied = at.failover && h.round <= mine;
    if (!applied && h.round != mine + 1)
      return outcome::refuse(fmt::format(
          "{}: {} pushes round {}, but its last push was round {}: a worker's push_rows "
          "rounds come one at a time, in order",
          what, worker.describe(), h.round, mine));
    if (!applied) {
      const auto changed = s.apply_now(req.ids, req.values, req.count);
      ++mine;
      if (auto failed = journal_change(h.key, s, changed, {{worker.process(), mine}}, at);
          !failed.empty())
        return outcome::refuse(fmt::format("{}: {}", what, failed));
    }
    reply r;
    r.round = h.round;
    r.type = s.spec().type;
    if (at.staleness < 0) return outcome::answer_now(r);
    // A process that has not pushed yet counts 0.
    std::uint64_t slowest = 0;
    if (p.pushes.size() >= static_cast<std::size_t>(at.num_workers)) {
      slowest = p.pushes.begin()->second;
      for (const auto& [process, n] : p.pushes) slowest = std::min(slowest, n);
    }
    const auto bound = static_cast<std::uint64_t>(at.staleness);
    std::vector<held_answer> released;
    for (auto it = p.held_round.begin(); it != p.held_round.end();) {
      if (p.pushes[it->first] - slowest > bound) {
        ++it;
        continue;
      }
      reply back = r;
      back.round = it->second;
      released.push_back({static_cast<int>(it->first), back});  // a process id (on_rows)
      it = p.held_round.erase(it);
    }
    if (mine - slowest > bound) {
      p.held_round[worker.process()] = h.round;
      return outcome::wait_and_release(std::move(released));
    }
    return outcome::release_each(r, std::move(released));
  }

  // Writes the shard's file into `dir` and answers its summary.
  outcome save(const wire::header& h, embedding::shard& s, const std::string& dir,
               const place& at) {
    try {
      const auto path = embedding::shard_file(dir, s.spec().name, at.server, at.servers);
      const auto summary = embedding::write_shard(path, s.spec(), at.server, at.servers,
                                                  s.rows_held(), s.serialise());
      auto answer = std::make_shared<std::vector<std::byte>>(embedding::save_answer_bytes);
      wire::detail::put_le<std::uint64_t>(answer->data(), summary.rows);
      wire::detail::put_le<std::uint64_t>(answer->data() + 8, summary.bytes);
      wire::detail::put_le<std::uint64_t>(answer->data() + 16, summary.checksum);
      reply r;
      r.bytes = *answer;
      r.round = h.round;
      r.type = s.spec().type;
      r.keep = std::move(answer);
      return outcome::answer_now(std::move(r));
    } catch (const usage_error& e) {
      return outcome::refuse(fmt::format("save_table of '{}' on server {}: {}", s.spec().name,
                                         at.server, e.what()));
    }
  }

  // Replaces the shard's rows with its file's in `dir`, once per directory: every worker asks,
  // the first one's request reads it.
  outcome load(const wire::header& h, embedding::shard& s, const std::string& dir,
               const place& at) {
    reply done;
    done.round = h.round;
    done.type = s.spec().type;
    auto& from = loaded_from_[h.key];
    if (from == dir) return outcome::answer_now(done);
    const auto what = fmt::format("load_table of '{}' on server {}", s.spec().name, at.server);
    if (s.round_open())
      return outcome::refuse(fmt::format("{}: a push_rows round is under way; every worker calls "
                                         "load_table before its first push_rows",
                                         what));
    try {
      const auto path = embedding::shard_file(dir, s.spec().name, at.server, at.servers);
      const auto bytes = embedding::read_shard(path, s.spec(), at.server, at.servers);
      try {
        s.restore(bytes);
      } catch (const wire::decode_error& e) {
        throw usage_error(fmt::format("the shard file {} is malformed: {}", path, e.what()));
      }
    } catch (const usage_error& e) {
      return outcome::refuse(fmt::format("{}: {}", what, e.what()));
    }
    from = dir;
    if (auto j = journals_.find(h.key); j != journals_.end()) {
      try {
        j->second.start(snapshot(h.key, s));
      } catch (const usage_error& e) {
        return outcome::refuse(fmt::format("{}: {}", what, e.what()));
      }
    }
    return outcome::answer_now(done);
  }

  std::unordered_map<std::uint64_t, std::unique_ptr<embedding::shard>> shards_;
  std::unordered_map<std::uint64_t, std::string> loaded_from_;  // key -> the last load's dir
  // Asynchronous training, by table key: each worker's pushes applied, and the round of its
  // push held by the staleness bound (0: none held).
  struct async_progress {
    std::map<std::uint32_t, std::uint64_t> pushes, held_round;  // by process_id
  };
  std::unordered_map<std::uint64_t, async_progress> progress_;
  std::unordered_map<std::uint64_t, embedding::journal> journals_;  // failover: by table key
};

}  // namespace bps::server
