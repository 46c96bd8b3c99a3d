#pragma once
/// @file
/// `basic_rdma<V>`'s connection management, on the progress thread: connect attempts (resolve
/// address, resolve route, connect, established), accepting, and every other connection-manager
/// event. Each link's queue pair and receives exist before its connect or accept is sent, so
/// the peer may send the moment it sees ESTABLISHED.

#include <thread>

#include "byteps/transport/rdma/basic_rdma.hpp"

namespace bps::transport {

template <RdmaVerbs V>
std::shared_ptr<typename basic_rdma<V>::link> basic_rdma<V>::connect(
    const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + timeout;
  std::string last_error = "timed out";
  while (clock::now() < deadline) {
    auto a = std::make_shared<attempt>();
    a->host = host;
    a->port = port;
    a->timeout = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
    auto result = a->done.get_future();
    post([this, a] { start_attempt(a); });
    if (result.wait_until(deadline) != std::future_status::ready) {
      post([this, a] {  // abandoned: the progress thread ends it
        for (auto& [id, x] : attempts_)
          if (x == a) return end_attempt(id, "timed out");
      });
      break;
    }
    try {
      return result.get();
    } catch (const std::exception& e) {
      last_error = e.what();
    }
    auto pause = std::min<clock::duration>(std::chrono::milliseconds(100),
                                           std::max<clock::duration>(deadline - clock::now(), {}));
    std::this_thread::sleep_for(pause);
  }
  throw communicator_error(fmt::format("could not connect to {}:{} over RDMA within {} ms: {}",
                                       host, port, timeout.count(), last_error));
}

template <RdmaVerbs V>
void basic_rdma<V>::start_attempt(const std::shared_ptr<attempt>& a) {
  typename V::cm_id* id = nullptr;
  try {
    id = v_.create_id(ch_, nullptr);
    attempts_[id] = a;
    v_.resolve_addr(id, a->host, a->port, std::max(a->timeout, std::chrono::milliseconds(1)));
  } catch (const std::exception& e) {
    if (id) return end_attempt(id, e.what());
    a->done.set_exception(std::current_exception());
  }
}

// Ends a connect attempt that failed: its link and id go, and connect() hears `error`.
template <RdmaVerbs V>
void basic_rdma<V>::end_attempt(typename V::cm_id* id, const std::string& error) {
  auto it = attempts_.find(id);
  if (it == attempts_.end()) return;
  auto a = it->second;
  attempts_.erase(it);
  if (a->l) {
    a->l->release();  // destroys the queue pair and the id
  } else {
    v_.destroy_id(id);
  }
  if (!a->finished) {
    a->finished = true;
    a->done.set_exception(std::make_exception_ptr(communicator_error(error)));
  }
}

template <RdmaVerbs V>
std::shared_ptr<typename basic_rdma<V>::link> basic_rdma<V>::make_link() {
  typename link::setup s{&v_,
                         dev_,
                         cc_,
                         registry_.get(),
                         max_frame_,
                         log_,
                         [this](std::function<void()> t) { post(std::move(t)); },
                         tally_.get()};
  return std::make_shared<link>(s, opts_);
}

template <RdmaVerbs V>
std::vector<std::byte> basic_rdma<V>::hello() const {
  std::vector<std::byte> out(rdma_msg::hello_size);
  wire::detail::put_le<std::uint32_t>(out.data(), rdma_msg::hello_magic);
  wire::detail::put_le<std::uint32_t>(out.data() + 4, static_cast<std::uint32_t>(opts_.rx_depth));
  return out;
}

template <RdmaVerbs V>
std::optional<std::uint32_t> basic_rdma<V>::read_hello(const std::vector<std::byte>& data) const {
  if (data.size() < rdma_msg::hello_size ||
      wire::detail::get_le<std::uint32_t>(data.data()) != rdma_msg::hello_magic)
    return std::nullopt;
  const auto depth = wire::detail::get_le<std::uint32_t>(data.data() + 4);
  if (depth < 4) return std::nullopt;
  return depth;
}

template <RdmaVerbs V>
void basic_rdma<V>::on_connect_request(verbs::cm_event<typename V::cm_id>& e) {
  auto listener = listeners_.find(e.listen_id);
  const auto peer_depth = read_hello(e.private_data);
  if (listener == listeners_.end() || !peer_depth) {
    log_.warn("rdma: refusing a connection from {}: {}", v_.peer_address(e.id),
              peer_depth ? "no listener" : "not a byteps RDMA peer (private data)");
    v_.reject(e.id, {});
    return v_.destroy_id(e.id);
  }
  try {
    auto l = make_link();
    l->attach(e.id, *peer_depth);
    l->create_qp_and_post_receives();
    accepting_[e.id] = l;
    v_.accept(e.id, hello());
  } catch (const std::exception& ex) {
    log_.warn("rdma: accepting a connection from {} failed: {}", v_.peer_address(e.id), ex.what());
    if (auto it = accepting_.find(e.id); it != accepting_.end()) {
      it->second->release();
      accepting_.erase(it);
    } else {
      v_.destroy_id(e.id);
    }
  }
}

template <RdmaVerbs V>
void basic_rdma<V>::handle_event(verbs::cm_event<typename V::cm_id>& e) {
  using T = verbs::cm_event_type;
  const auto what = fmt::format("{} (status {})", verbs::event_name(e.type), e.status);
  if (e.type == T::connect_request) return on_connect_request(e);
  if (auto it = attempts_.find(e.id); it != attempts_.end()) {
    auto& a = *it->second;
    const auto where = fmt::format("{}:{}", a.host, a.port);
    try {
      switch (e.type) {
        case T::addr_resolved: return v_.resolve_route(e.id, std::max(a.timeout, std::chrono::milliseconds(1)));
        case T::route_resolved: {
          a.l = make_link();
          a.l->attach(e.id, 4);
          a.l->create_qp_and_post_receives();
          return v_.connect(e.id, hello());
        }
        case T::established: {
          auto depth = read_hello(e.private_data);
          if (!depth) return end_attempt(e.id, where + " is not a byteps RDMA peer");
          a.l->attach(e.id, *depth);
          links_[e.id] = a.l;
          a.finished = true;
          a.done.set_value(a.l);
          attempts_.erase(it);
          return;
        }
        case T::rejected: return end_attempt(e.id, "rejected by " + where + ": " + what);
        default: return end_attempt(e.id, where + ": " + what);
      }
    } catch (const std::exception& ex) {
      return end_attempt(e.id, ex.what());
    }
  }
  if (auto it = accepting_.find(e.id); it != accepting_.end()) {
    auto l = it->second;
    accepting_.erase(it);
    if (e.type != T::established) return l->release();
    links_[e.id] = l;
    for (auto& [lid, on_accept] : listeners_) {
      (void)lid;
      try {
        on_accept(l);
      } catch (const std::exception& ex) {
        log_.error("accepting a connection failed: {}", ex.what());
      }
      break;  // (one listener per transport in practice; the first hears of it)
    }
    return;
  }
  if (auto it = links_.find(e.id); it != links_.end()) {
    switch (e.type) {
      case T::disconnected: {
        // What the peer sent before it disconnected is already in the queue (RC keeps order):
        // deliver it first, as TCP reads a peer's last frames before its end of stream.
        auto& l = *it->second;
        while (l.polling() && !l.released() && l.poll()) {
        }
        return l.fail("connection closed by " + l.peer());
      }
      case T::timewait_exit:
      case T::established: return;
      default: return it->second->fail(it->second->peer() + ": " + what);
    }
  }
  if (e.type != T::timewait_exit) log_.debug("rdma: {} for an id no longer in use", what);
}

}  // namespace bps::transport
