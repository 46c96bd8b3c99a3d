#pragma once
/// @file
/// `server::register_pool(pool, transport, log)`: a server's partition buffers (its buffer pool:
/// every push lands in one, a worker link's landing buffer (server/landing.hpp) or one taken per
/// push, and every sum is answered from one) registered with a transport that registers memory
/// (`T::registers_memory`, RDMA), so pushes are written straight into them and answers written
/// straight from them, with no staging copy. Each buffer is registered once, when
/// the pool allocates it, and the pool then keeps its buffers until the server ends (after the
/// transport stopped). Other transports (TCP) leave the pool as it is.

#include <exception>
#include <span>

#include "byteps/core/log.hpp"
#include "byteps/detail/buffer_pool.hpp"

namespace bps::server {

template <class T>
void register_pool(detail::buffer_pool& pool, T& transport, logger& log) {
  if constexpr (requires { requires T::registers_memory; }) {
    pool.keep_and_report([&transport, &log](std::span<std::byte> b) {
      try {
        transport.register_memory(b);
      } catch (const std::exception& e) {  // e.g. RLIMIT_MEMLOCK reached: that buffer stages
        log.warn("registering a {}-byte buffer failed; its frames go through staging: {}", b.size(),
                 e.what());
      }
    });
  }
}

}  // namespace bps::server
