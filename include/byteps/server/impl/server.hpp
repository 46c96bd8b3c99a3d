#pragma once
/// @file
/// The bodies of `bps::Server` (server/server.hpp). Header-only mode includes them from there;
/// in compiled mode (`BYTEPS_COMPILED`) a translation unit that builds a server of its own
/// transport or handler includes this header (or <byteps/bodies.hpp>).

#include <memory>
#include <utility>

#include "byteps/compress/registry.hpp"
#include "byteps/server/decoding.hpp"
#include "byteps/server/handler.hpp"
#include "byteps/server/node.hpp"
#include "byteps/server/server.hpp"
#include "byteps/server/sync_sum.hpp"
#include "byteps/transport/standard.hpp"
#include "byteps/transport/transport.hpp"

namespace bps {

template <class T, class H>
Server<T, H>::Server(const Config& cfg) : Server(cfg, transport_options::from(cfg)) {}

template <class T, class H>
Server<T, H>::Server(const Config& cfg, const transport_options& options)
    : Server(cfg, options, compress::registry{}) {}

template <class T, class H>
Server<T, H>::Server(const Config& cfg, const transport_options& options,
                     compress::registry compressors) {
  static_assert(Transport<T>, "Server<T, ...>: T must model bps::Transport "
                              "(transport/transport.hpp)");
  static_assert(ServerHandler<H>, "Server<T, H>: H must model bps::ServerHandler "
                                  "(server/handler.hpp)");
  node_ = std::make_unique<server::node<T, H>>(cfg, options, std::move(compressors));
}

template <class T, class H>
Server<T, H>::~Server() = default;

template <class T, class H>
int Server<T, H>::rank() const noexcept {
  return node_->rank();
}

template <class T, class H>
std::uint16_t Server<T, H>::port() const noexcept {
  return node_->port();
}

template <class T, class H>
void Server<T, H>::run() {
  node_->run();
}

}  // namespace bps
