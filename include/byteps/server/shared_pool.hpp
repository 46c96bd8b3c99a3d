#pragma once
/// @file
/// `server::share_pool(pool, transport, log)`: with a transport that lets a peer on the same
/// host read payloads where they lie (`transport::SharesMemory`: `transport::ipc`, the
/// default's shortcut on), a server makes its partition buffers of at least the size from which
/// answers take shared memory in memory it shares (`buffer_pool::share_from`). A round's sum
/// lies in one of them, so the answer to a colocated worker goes as its place there and the
/// worker's copy into its tensor is the only one (no copy into its ring). Safe because a sum
/// stays put until round + 2 begins (`key_state::finish_round`), and a round begins only after
/// every worker pushed the one before, which each does after it read the answer of the one
/// before that (a worker runs one operation on a tensor at a time). Every other reply with
/// bytes owns them on the heap (`reply::keep`). Other transports leave the pool as it is, and
/// so does a server no worker on its host connected to before a buffer is made: its answers
/// go by TCP, where shared memory buys nothing.

#include <cstddef>
#include <span>
#include <string>

#include "byteps/core/log.hpp"
#include "byteps/detail/buffer_pool.hpp"
#include "byteps/transport/transport.hpp"

namespace bps::server {

template <class T>
void share_pool(detail::buffer_pool& pool, T& transport, logger& log) {
  if constexpr (transport::SharesMemory<T> && requires { T::min_ipc_answer_bytes; }) {
    if (!transport.shares_memory()) return;
    pool.share_from(T::min_ipc_answer_bytes, [&transport, &log](const std::string& path,
                                                                std::span<std::byte> memory) {
      if (memory.empty()) {
        log.warn("partition buffers stay private, so answers to workers on this host are copied "
                 "into their rings: {}",
                 path);
        return;
      }
      transport.share_memory(path, memory);
    }, [&transport] { return transport.peer_on_host(); });
  }
}

}  // namespace bps::server
