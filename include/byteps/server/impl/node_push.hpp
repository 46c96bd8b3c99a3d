#pragma once
/// @file
/// What `server::node` does with a push (see server/node.hpp): the thread it is summed on, the
/// handler's decision, and that decision carried out: answers to the workers waiting for the
/// round, errors, the timeline's spans and the throughput counts. Included at the end of
/// server/node.hpp.

#include <fmt/core.h>

#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>

#include "byteps/server/node.hpp"

namespace bps::server {

template <class T, class H>
void node<T, H>::post_push(session_ptr s, const wire::header& h, server::arriving_push in,
                           server::receive_times received) {
  if (in.complete) stats_.received(in.size());
  auto& e = engine_for(key_id{h.key, h.part});
  if (in.first && in.complete && in.size() <= inline_sum_bytes) {
    {
      std::lock_guard lock(e.mu);
      on_push(e, s, h, in.bytes(), received, s->batching);  // on s's I/O thread: its batch
    }
    pool_->give_back(std::move(in.buffer));  // or whatever the handler swapped in for it
    return;
  }
  e.post([this, &e, s = std::move(s), h, received,
          in = std::make_shared<server::arriving_push>(std::move(in))] {
    on_push(e, s, h, in->bytes(), received);
    pool_->give_back(std::move(in->buffer));
  });
}

template <class T, class H>
void node<T, H>::on_push(engine& e, const session_ptr& s, const wire::header& h,
                         server::push_bytes push, server::receive_times received,
                         answer_batches* batch) {
  if (auto dead = dead_reason(); !dead.empty()) {
    if (push.complete) s->send_error(h, dead, wire::flag_fatal);
    return;
  }
  const bool first = push.first;
  const bool traced = trace_.on() && (h.flags & wire::flag_traced) != 0 && push.complete;
  const auto sum_ns = traced ? trace_.now() : 0;
  const std::function<std::string()> name = [this, key = h.key] { return names_.quoted(key); };
  std::shared_ptr<const compress::spec> codec;  // compressed pushes only: a lock, a lookup
  if ((h.flags & wire::flag_compressed) != 0) {
    if constexpr (!server::decodes_pushes<H>)
      return s->send_error(h,
                           fmt::format("{} partition {}: a compressed push, but this server's "
                                       "handler does not decode (use server::decoding<>)",
                                       name(), h.part),
                           wire::flag_usage);
    codec = names_.codec(h.key);
  }
  server::outcome o = e.handler.handle(server::request{
      h, std::move(push), s->worker, cfg_.worker_slots(), cfg_.failover(), name, codec.get()});
  if (o.answer.contributors == 0) o.answer.contributors = e.contributors;
  using kind = server::outcome::kind;
  const key_id id{h.key, h.part};
  const auto answer_released = [&] {
    for (const auto& a : o.released)
      if (auto w = e.waiting.take(id, a.worker)) answer(h, a.answer, std::span(&w, 1), batch);
  };
  switch (o.what) {
    case kind::refuse:
      return s->send_error(h, o.error, wire::flag_usage);
    case kind::taken:
      return;
    case kind::answer_now:
      if (log_.enabled(log_level::debug))  // an async handler's every push: no name lookup
        log_.debug("{} partition {} round {}: worker {} answered alone with round {}", name(),
                   h.part, h.round, s->worker, o.answer.round);
      return answer(h, o.answer, std::span(&s, 1), batch);
    case kind::release_each:          // held workers of one key may wait for different rounds
      if (h.type == wire::msg::push)  // an offer's worker has its answer already
        answer(h, o.answer, std::span(&s, 1), batch);
      return answer_released();
    default:
      break;
  }
  auto& room =
      h.type == wire::msg::push && first ? e.waiting.join(id, s, h.round) : e.waiting.at(id);
  if (traced && h.type == wire::msg::push)
    server::trace_push(trace_, names_, room, h, s->worker, cfg_.worker_slots(), received, sum_ns);
  if (o.what == kind::wait) return;
  if (o.what == kind::wait_and_release) return answer_released();
  if (o.what == kind::piece) {
    for (auto& w : room.workers) w->send_piece(h, o.answer, o.last);
    stats_.sent(o.answer.bytes.size() * room.workers.size());
    if (!o.last) return;
    stats_.round_done();
    if (trace_.on()) server::trace_answers(trace_, names_, room, h, trace_.now());
    room.workers.clear();
    return;
  }
  if (h.type == wire::msg::sum_offer)
    log_.debug("{} partition {} round {}: {} worker(s) answered with worker {}'s sum_offer", name(),
               h.part, h.round, room.workers.size(), s->worker);
  const auto complete_ns = trace_.now();
  if (o.what == kind::release) {
    answer(h, o.answer, room.workers, batch);
    stats_.round_done();
  } else {
    for (auto& w : room.workers) w->send_error(h, o.error, wire::flag_usage);
  }
  if (trace_.on()) server::trace_answers(trace_, names_, room, h, complete_ns);
  room.workers.clear();
}

template <class T, class H>
void node<T, H>::post_rows(session_ptr s, const wire::header& h,
                           detail::buffer_pool::buffer payload) {
  stats_.received(payload.size);
  auto& e = engine_for(key_id{h.key, 0});
  e.post([this, &e, s = std::move(s), h,
          in = std::make_shared<detail::buffer_pool::buffer>(std::move(payload))] {
    on_rows(e, s, h, in->span());
    pool_->give_back(std::move(*in));
  });
}

template <class T, class H>
void node<T, H>::on_rows(engine& e, const session_ptr& s, const wire::header& h,
                         std::span<const std::byte> payload) {
  if (auto dead = dead_reason(); !dead.empty()) return s->send_error(h, dead, wire::flag_fatal);
  server::outcome o;
  try {
    o = e.tables.handle(h, payload, {.machine = s->worker, .local_rank = s->local_rank},
                        {.server = rank(),
                         .servers = cfg_.num_servers,
                         .num_workers = worker_processes_.load(std::memory_order_acquire),
                         .async = cfg_.enable_async,
                         .staleness = cfg_.async_staleness,
                         .failover = cfg_.failover(),
                         .journal_dir = cfg_.table_journal_dir,
                         .job_id = job_id_.load(std::memory_order_acquire)});
  } catch (const wire::decode_error& err) {  // answered, as a refused request is
    return s->send_error(h, fmt::format("a malformed rows_request: {}", err.what()),
                         wire::flag_usage);
  }
  using kind = server::outcome::kind;
  const key_id id{h.key, 0};
  switch (o.what) {
    case kind::refuse:
      return s->send_error(h, o.error, wire::flag_usage);
    case kind::answer_now:
      stats_.sent(o.answer.bytes.size());
      return s->send_rows_answer(h, o.answer);
    case kind::wait:
      e.waiting.join(id, s, h.round);
      return;
    case kind::release: {
      auto& room = e.waiting.join(id, s, h.round);
      for (auto& w : room.workers) w->send_rows_answer(h, o.answer);
      room.workers.clear();
      stats_.round_done();
      return;
    }
    case kind::fail_round: {  // the round was applied but not journaled (server/tables.hpp)
      auto& room = e.waiting.join(id, s, h.round);
      for (auto& w : room.workers) w->send_error(h, o.error, wire::flag_usage);
      room.workers.clear();
      return;
    }
    case kind::release_each:
    case kind::wait_and_release: {  // asynchronous training's staleness bound
      if (o.what == kind::release_each)
        s->send_rows_answer(h, o.answer);
      else
        e.waiting.join(id, s, h.round);
      for (const auto& a : o.released) {  // `worker` is a process_id here
        auto held = e.waiting.take_if(id, [&](const session& w) {
          return embedding::process_id(w.worker, w.local_rank) ==
                 static_cast<std::uint32_t>(a.worker);
        });
        if (!held) continue;
        wire::header about = h;
        about.round = a.answer.round;
        held->send_rows_answer(about, a.answer);
      }
      return;
    }
    default:
      return s->send_error(h, "a table request's outcome the server cannot carry out",
                           wire::flag_usage);
  }
}

template <class T, class H>
void node<T, H>::answer(const wire::header& h, const server::reply& a,
                          std::span<const session_ptr> to, answer_batches* batch) {
  for (auto& w : to)
    if (batch == nullptr || !batch->add(w, h, a)) w->send_answer(h, a);
  stats_.sent(a.bytes.size() * to.size());
}

}  // namespace bps::server
