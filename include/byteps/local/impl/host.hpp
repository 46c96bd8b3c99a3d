#pragma once
/// @file
/// The bodies of local/host.hpp's functions that are not templates: inline in header-only mode,
/// compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::local {

void host::attach(const cluster& c) {
  cluster_ = c;
  log_.rename(fmt::format("worker {}.{} local", c.machine, local_rank_));
  const auto deadline = clock::now() + std::chrono::seconds(30);
  if (share_) remove_orphan_segments();  // before this job's own control exists
  control_ = detail::shm_segment(segment_name(c.job_id, c.machine, "control"),
                                 sizeof(control_block), control_fingerprint,
                                 share_ ? 0 : local_size_, deadline, "local ranks meeting");
  control_block_ = reinterpret_cast<control_block*>(control_.data());
  control_block_->local_size.store(static_cast<std::uint32_t>(local_size_));
  // A shared lock on the control segment for as long as this rank lives (the kernel drops it
  // when the process dies), taken before the pid is written, which marks the rank attached:
  // a job that sweeps leftovers tells a live rank by its lock alone, which another pid
  // namespace cannot hide.
  if (share_) {
    alive_lock_ = ::shm_open(control_.name().c_str(), O_RDONLY, 0);
    if (alive_lock_ >= 0) ::flock(alive_lock_, LOCK_SH);
  }
  if (local_rank_ >= 0 && static_cast<std::uint32_t>(local_rank_) < control_block::max_ranks)
    control_block_->pids[local_rank_].store(static_cast<std::int32_t>(::getpid()));
  log_.info("local ranks of machine {} meet in shared memory /dev/shm{}", c.machine,
            segment_name(c.job_id, c.machine, "*"));
}

step_status host::reduce_scatter(work& w, tensor_state& t, step_state& s) {
  if (s == step_state::arrive) {
    if (t.arrived == nullptr) open(t, w);
    if (w.contributes) {
      // Only what the other ranks sum: this rank sums its own slices from its tensor
      // (`reduce_part`), so they need no copy.
      const auto esize = dtype_size(w.type);
      const auto [first, last] = owned_range(w.count, local_rank_, local_size_, cluster_.slices);
      const auto* data = static_cast<const std::byte*>(w.data);
      std::memcpy(t.slot(local_rank_), data, first * esize);
      std::memcpy(t.slot(local_rank_) + last * esize, data + last * esize,
                  (w.count - last) * esize);
    } else {
      reduce::fill_negative_zero(t.slot(local_rank_), w.count, w.type);
    }
    t.arrived->fetch_add(1, std::memory_order_acq_rel);
    ring();
    s = step_state::reduce;
    return step_status::moved;
  }
  check_peers(w, t);
  if (t.arrived->load(std::memory_order_acquire) < target(w)) return step_status::waiting;
  const auto esize = dtype_size(w.type);
  w.owned = t.result(local_size_) +
            owned_range(w.count, local_rank_, local_size_, cluster_.slices).first * esize;
  if (share_ && w.round == 0) w.owned_segment = {t.segment.name(), t.segment.whole()};
  s = step_state::flowing;
  return step_status::done;
}

bool host::reduce_part(work& w, tensor_state& t, std::size_t i) {
  const part& p = w.parts[i];
  const auto esize = dtype_size(w.type);
  inputs_.clear();
  // This rank's own input is its tensor, unchanged until the partition's sum comes back and is
  // gathered into it (its slot holds only the slices other ranks own).
  for (int l = 0; l < local_size_; ++l)
    inputs_.push_back(l == local_rank_ && w.contributes
                          ? static_cast<const std::byte*>(w.data) + p.first * esize
                          : t.slot(l) + p.first * esize);
  reduce::sum_of(t.result(local_size_) + p.first * esize, inputs_, p.last - p.first, w.type);
  return true;
}

bool host::gather_part(work& w, tensor_state& t, std::size_t i) {
  check_peers(w, t);
  if (t.stamps[i].load(std::memory_order_acquire) < w.round + 1) return false;
  const part& p = w.parts[i];
  const auto esize = dtype_size(w.type);
  std::memcpy(static_cast<std::byte*>(w.data) + p.first * esize,
              t.result(local_size_) + p.first * esize, (p.last - p.first) * esize);
  return true;
}

step_status host::all_gather(work& w, tensor_state& t, step_state&) {
  if (w.error) {  // this rank's slices failed: the other ranks must not wait for them
    t.failed->store(1);
    ring();
    std::rethrow_exception(w.error);
  }
  return step_status::done;
}

std::string host::waiting_for(const work& w, const tensor_state& t, const step_state& s) const {
  if (s == step_state::arrive) return "this local rank's stage thread did not get to it";
  if (s == step_state::reduce) {
    const auto have = t.arrived->load();
    const auto behind = target(w) - std::min(have, target(w));
    return fmt::format(
        "{} of the {} local ranks of machine {} have not called it. Does every "
        "local rank call it?",
        behind, local_size_, cluster_.machine);
  }
  std::size_t missing = 0;
  for (std::size_t i = 0; i < w.parts.size(); ++i)
    if (t.stamps[i].load() < w.round + 1) ++missing;
  return fmt::format(
      "{} of its {} partitions have not come back to machine {} from the other "
      "local ranks. Does every local rank call it?",
      missing, w.parts.size(), cluster_.machine);
}

void host::shutdown() {
  // Names some local rank may never map (the job ended early): gone now.
  if (control_block_ != nullptr) {
    const auto n =
        std::min<std::uint32_t>(control_block_->registered.load(), control_block::capacity);
    for (std::uint32_t i = 0; i < n; ++i)
      if (auto key = control_block_->keys[i]; key != 0) ::shm_unlink(tensor_segment(key).c_str());
  }
  control_.unlink();
  if (alive_lock_ >= 0) ::close(alive_lock_);
  alive_lock_ = -1;
}

void host::remove_orphan_segments() {
  constexpr std::size_t bytes = sizeof(detail::segment_header) + sizeof(control_block);
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string file = entry.path().filename().string();
    if (!file.starts_with("bps-") || file.starts_with("bps-ipc-") || !file.ends_with("-control"))
      continue;
    const std::string name = "/" + file;
    const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {  // some local rank of that job lives
      ::close(fd);
      continue;
    }
    struct stat st {};
    void* p = MAP_FAILED;
    if (::fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) == bytes)
      p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      continue;
    }
    const auto* header = static_cast<const detail::segment_header*>(p);
    const auto* block = reinterpret_cast<const control_block*>(static_cast<const std::byte*>(p) +
                                                               sizeof(detail::segment_header));
    std::vector<std::string> doomed;
    if (header->magic.load() == detail::segment_header::ready_magic &&
        header->fingerprint == control_fingerprint && header->users == 0 && all_attached(*block)) {
      const auto prefix = name.substr(0, name.size() - std::strlen("control"));
      const auto n = std::min<std::uint32_t>(block->registered.load(), control_block::capacity);
      for (std::uint32_t i = 0; i < n; ++i)
        if (block->keys[i] != 0) doomed.push_back(fmt::format("{}{:016x}", prefix, block->keys[i]));
      doomed.push_back(name);
    }
    ::munmap(p, bytes);
    for (const auto& d : doomed) ::shm_unlink(d.c_str());
    ::close(fd);  // drops the lock, after the names are gone
  }
}

void host::check_peers(const work& w, const tensor_state& t) const {
  if (t.failed->load() != 0)
    throw usage_error(w.what +
                      ": another local rank of this machine failed on this tensor "
                      "(its log says why)");
}

void host::open(tensor_state& t, const work& w) {
  t.slot_bytes = (w.count * dtype_size(w.type) + 63) / 64 * 64;
  const std::size_t stamp_bytes = w.parts.size() * sizeof(std::uint64_t);
  const std::size_t bytes =
      64 + t.slot_bytes * static_cast<std::size_t>(local_size_ + 1) + stamp_bytes;
  const std::uint64_t fingerprint = tensor_key(
      fmt::format("{} {} {} {}", w.count, dtype_name(w.type), local_size_, w.parts.size()));
  const auto index = control_block_->registered.fetch_add(1);
  if (index < control_block::capacity) control_block_->keys[index] = w.key;
  t.segment = detail::shm_segment(tensor_segment(w.key), bytes, fingerprint,
                                  share_ ? 0 : local_size_, w.deadline, w.what);
  auto* block = reinterpret_cast<tensor_block*>(t.segment.data());
  t.arrived = &block->arrived;
  t.failed = &block->failed;
  t.stamps = reinterpret_cast<std::atomic<std::uint64_t>*>(t.result(local_size_) + t.slot_bytes);
}

}  // namespace bps::local
