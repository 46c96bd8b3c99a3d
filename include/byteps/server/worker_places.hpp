#pragma once
/// @file
/// `server::worker_places`: one link per worker process on a server. A `peer_hello` claims its
/// (machine, local rank); a second claim while the first link lives is refused, naming both
/// addresses, so a stranger with a replayed or forged hello cannot sit beside a real worker.
///
/// @par Thread Safety
/// Every member may be called from any thread.

#include <fmt/format.h>

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace bps::server {

class worker_places {
 public:
  /// Why worker `machine`'s local rank `local_rank`, connecting from `peer`, cannot have its
  /// place; nullopt when it took it.
  std::optional<std::string> claim(int machine, int local_rank, const std::string& peer) {
    std::lock_guard lock(mu_);
    auto [it, fresh] = holders_.try_emplace({machine, local_rank}, peer);
    if (fresh) return std::nullopt;
    return fmt::format(
        "worker {} local rank {} is already connected from {}; a second "
        "peer_hello for it came from {}",
        machine, local_rank, it->second, peer);
  }

  /// The link that held the place closed.
  void release(int machine, int local_rank) {
    std::lock_guard lock(mu_);
    holders_.erase({machine, local_rank});
  }

 private:
  std::mutex mu_;
  std::map<std::pair<int, int>, std::string> holders_;  // (machine, local rank) -> its address
};

}  // namespace bps::server
