#pragma once
/// @file
/// What a worker joining a running elastic job is given (docs/reliability.md, "Elastic
/// training"): `job_state`, the state one member sends it at the agreed step boundary, and
/// `state_registry`, the tensors and bytes a trainer names for it
/// (`Communicator::register_state`, `Communicator::on_state`).
///
/// @par Thread Safety
/// `state_registry` is the trainer's: register and call `step_boundary()` from one thread.

#include <fmt/core.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "byteps/core/error.hpp"
#include "byteps/wire/codec.hpp"

namespace bps::worker {

/// The job as one member stands at the boundary a worker joins at.
struct job_state {
  std::uint64_t boundaries = 0;  ///< `step_boundary()` calls it made, the join's one included
  std::uint64_t barriers = 0;    ///< barriers it entered
  /// Where each tensor stands (its next push's round), by key: the newcomer's pushes must
  /// carry the rounds the servers are at.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> rounds;
  std::vector<std::pair<std::string, std::vector<std::byte>>> tensors;  ///< registered ones
  std::vector<std::byte> extra;  ///< the trainer's own bytes (`on_state`'s save)
};

inline std::vector<std::byte> encode(const job_state& s) {
  wire::byte_writer w;
  w.put(s.boundaries);
  w.put(s.barriers);
  w.put(static_cast<std::uint64_t>(s.rounds.size()));
  for (const auto& [key, round] : s.rounds) {
    w.put(key);
    w.put(round);
  }
  auto put_bytes = [&](const std::vector<std::byte>& b) {
    w.put(static_cast<std::uint64_t>(b.size()));
    w.bytes().insert(w.bytes().end(), b.begin(), b.end());
  };
  w.put(static_cast<std::uint64_t>(s.tensors.size()));
  for (const auto& [name, bytes] : s.tensors) {
    w.put_string(name);
    put_bytes(bytes);
  }
  put_bytes(s.extra);
  return w.take();
}

/// @throws wire::decode_error when malformed.
inline job_state decode_job_state(std::span<const std::byte> in) {
  wire::byte_reader r(in);
  job_state s;
  s.boundaries = r.get<std::uint64_t>();
  s.barriers = r.get<std::uint64_t>();
  auto count = [&](std::size_t each) {
    const auto n = r.get<std::uint64_t>();
    if (n > r.remaining() / each) throw wire::decode_error("a job state's count overruns it");
    return static_cast<std::size_t>(n);
  };
  auto get_bytes = [&] {
    const auto b = r.get_span(count(1));
    return std::vector<std::byte>(b.begin(), b.end());
  };
  for (std::size_t i = 0, n = count(16); i < n; ++i) {
    const auto key = r.get<std::uint64_t>();
    s.rounds.emplace_back(key, r.get<std::uint64_t>());
  }
  for (std::size_t i = 0, n = count(12); i < n; ++i) {
    auto name = r.get_string(4096);
    s.tensors.emplace_back(std::move(name), get_bytes());
  }
  s.extra = get_bytes();
  if (!r.done()) throw wire::decode_error("trailing bytes after a job state");
  return s;
}

/// The trainer's state a joining worker is given: tensors by name, and bytes of its own.
class state_registry {
 public:
  using save_fn = std::function<std::vector<std::byte>()>;
  using load_fn = std::function<void(std::span<const std::byte>)>;

  /// `name` refers to `bytes` from now on. Throws `usage_error` when the name is taken.
  void add(std::string name, std::span<std::byte> bytes) {
    for (const auto& [n, b] : tensors_)
      if (n == name)
        throw usage_error(fmt::format("register_state: '{}' is registered already", name));
    if (name.size() > 4096)
      throw usage_error(fmt::format("register_state: a name of {} bytes (at most 4096)",
                                    name.size()));
    tensors_.emplace_back(std::move(name), bytes);
  }

  void callbacks(save_fn save, load_fn load) {
    save_ = std::move(save);
    load_ = std::move(load);
  }

  /// The registered tensors' bytes and the trainer's own, as they are now.
  void save_into(job_state& s) const {
    for (const auto& [name, bytes] : tensors_)
      s.tensors.emplace_back(name, std::vector<std::byte>(bytes.begin(), bytes.end()));
    if (save_) s.extra = save_();
  }

  /// Copies `s` into the registered tensors and hands the trainer its bytes. Throws
  /// `usage_error` naming a tensor registered here but not sent, or sent in another size (the
  /// workers registered different state), and the tensors sent but not registered here.
  void load(const job_state& s) const {
    for (const auto& [name, bytes] : tensors_) {
      const std::vector<std::byte>* sent = nullptr;
      for (const auto& [n, b] : s.tensors)
        if (n == name) sent = &b;
      if (sent == nullptr)
        throw usage_error(fmt::format("register_state: '{}' is registered on this worker, but "
                                      "the worker that sent the job's state has no such tensor",
                                      name));
      if (sent->size() != bytes.size())
        throw usage_error(fmt::format("register_state: '{}' has {} bytes on this worker, but "
                                      "{} on the worker that sent the job's state",
                                      name, bytes.size(), sent->size()));
      if (!bytes.empty()) std::memcpy(bytes.data(), sent->data(), bytes.size());
    }
    for (const auto& [n, b] : s.tensors) {
      bool here = false;
      for (const auto& [name, bytes] : tensors_) here = here || name == n;
      if (!here)
        throw usage_error(fmt::format("register_state: the worker that sent the job's state "
                                      "registered '{}', which this worker did not register "
                                      "before its first step_boundary()",
                                      n));
    }
    if (load_) load_(s.extra);
  }

 private:
  std::vector<std::pair<std::string, std::span<std::byte>>> tensors_;
  save_fn save_;
  load_fn load_;
};

}  // namespace bps::worker
