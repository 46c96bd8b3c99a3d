#pragma once
/// @file
/// `bps::rendezvous::vacancies`: the scheduler's failover bookkeeping. A server rank is vacant
/// from the moment its server is lost (after the cluster formed) until a replacement takes it;
/// each vacancy has a deadline (`BYTEPS_FAILOVER_TIMEOUT_MS` after the loss) after which the job
/// fails. Not thread-safe: the scheduler's mutex guards it.

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace bps::rendezvous {

class vacancies {
 public:
  using clock = std::chrono::steady_clock;

  struct vacancy {
    int rank = 0;
    std::string peer;  ///< where the lost server was
    std::string why;   ///< "server 1 at 127.0.0.1:4242 disconnected (...)", for messages
    clock::time_point deadline;
  };

  void open(int rank, std::string peer, std::string why, clock::time_point deadline) {
    open_[rank] = vacancy{rank, std::move(peer), std::move(why), deadline};
  }
  void close(int rank) { open_.erase(rank); }
  bool is_open(int rank) const { return open_.contains(rank); }
  bool empty() const noexcept { return open_.empty(); }

  /// The vacant ranks, lowest first.
  std::vector<int> ranks() const {
    std::vector<int> r;
    for (const auto& [rank, v] : open_) r.push_back(rank);
    return r;
  }

  /// The first vacancy whose deadline passed at `now`, if any.
  std::optional<vacancy> overdue(clock::time_point now) const {
    for (const auto& [rank, v] : open_)
      if (now >= v.deadline) return v;
    return std::nullopt;
  }

 private:
  std::map<int, vacancy> open_;
};

}  // namespace bps::rendezvous
