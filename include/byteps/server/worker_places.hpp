#pragma once
/// @file
/// `server::worker_places<Session>`: one link per worker process on a server. A `peer_hello`
/// claims its (machine, local rank); a second claim while the first link lives is refused, naming
/// both addresses, so a stranger with a replayed or forged hello cannot sit beside a real worker.
/// The server reaches every worker through it when the job fails (`holders`), and waits for
/// them to hang up before it closes their links (`wait_until_empty`).
///
/// @par Thread Safety
/// Every member may be called from any thread.

#include <fmt/core.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace bps::server {

template <class Session>
class worker_places {
 public:
  /// Why worker `machine`'s local rank `local_rank`, connecting from `peer` on `holder`, cannot
  /// have its place; nullopt when it took it.
  std::optional<std::string> claim(int machine, int local_rank, const std::string& peer,
                                   std::weak_ptr<Session> holder) {
    std::lock_guard lock(mu_);
    auto [it, fresh] = holders_.try_emplace({machine, local_rank}, peer, std::move(holder));
    if (fresh) return std::nullopt;
    return fmt::format(
        "worker {} local rank {} is already connected from {}; a second "
        "peer_hello for it came from {}",
        machine, local_rank, it->second.first, peer);
  }

  /// The link that held the place closed.
  void release(int machine, int local_rank) {
    {
      std::lock_guard lock(mu_);
      holders_.erase({machine, local_rank});
    }
    emptied_.notify_all();
  }

  /// Waits until no link holds a place, or until `deadline`; true when none does.
  bool wait_until_empty(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mu_);
    return emptied_.wait_until(lock, deadline, [&] { return holders_.empty(); });
  }

  /// The sessions that hold a place now.
  std::vector<std::shared_ptr<Session>> holders() {
    std::vector<std::shared_ptr<Session>> out;
    std::lock_guard lock(mu_);
    for (auto& [place, holder] : holders_)
      if (auto s = holder.second.lock()) out.push_back(std::move(s));
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable emptied_;
  // (machine, local rank) -> its address and session
  std::map<std::pair<int, int>, std::pair<std::string, std::weak_ptr<Session>>> holders_;
};

}  // namespace bps::server
