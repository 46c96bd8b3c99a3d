#pragma once
/// @file
/// The bodies of transport/tcp.hpp's functions that are not templates: inline in header-only mode,
/// compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::transport {

tcp::tcp(const Config& cfg, const options& opts)
    : max_frame_(cfg.max_frame_bytes()),
      notsent_lowat_(opts.notsent_lowat),
      log_(cfg.log, "tcp"),
      // One thread: Asio then queues a handler's own posts without taking its lock.
      io_(opts.io_threads == 1 ? 1 : ASIO_CONCURRENCY_HINT_DEFAULT),
      work_(asio::make_work_guard(io_)) {
  opts.validate();
  for (int i = 0; i < opts.io_threads; ++i) threads_.emplace_back([this] { io_.run(); });
}

std::shared_ptr<tcp::link> tcp::adopt(asio::ip::tcp::socket socket) {
  tune_connection(socket, notsent_lowat_);
  auto l = std::make_shared<link>(std::move(socket), max_frame_, log_);
  std::lock_guard lock(mu_);
  std::erase_if(links_, [](const std::weak_ptr<link>& w) { return w.expired(); });
  links_.push_back(l);
  if (stopped_) l->close();
  return l;
}

std::uint16_t tcp::listen(const std::string& host, std::uint16_t port,
                          std::function<void(std::shared_ptr<link>)> on_accept) {
  return listeners_.listen(
      host, port, [this, on_accept = std::move(on_accept)](asio::ip::tcp::socket socket) {
        tcp_listeners::hand_over(log_, [&] { on_accept(adopt(std::move(socket))); });
      });
}

std::shared_ptr<tcp::link> tcp::connect(const std::string& host, std::uint16_t port,
                                        std::chrono::milliseconds timeout) {
  return dial_until(io_, host, port, timeout,
                    [this](asio::ip::tcp::socket socket, auto /*deadline*/, std::string&) {
                      return adopt(std::move(socket));
                    });
}

void tcp::stop() {
  std::vector<std::shared_ptr<link>> links;
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    listeners_.close();
    for (auto& w : links_)
      if (auto l = w.lock()) links.push_back(std::move(l));
  }
  for (auto& l : links) l->close();
  links.clear();
  work_.reset();
  for (auto& t : threads_) {
    if (t.get_id() == std::this_thread::get_id()) {
      t.detach();  // stopped from one of our own callbacks: the thread ends by itself
    } else if (t.joinable()) {
      t.join();
    }
  }
  threads_.clear();
}

}  // namespace bps::transport
