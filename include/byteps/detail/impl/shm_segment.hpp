#pragma once
/// @file
/// The bodies of detail/shm_segment.hpp's functions that are not templates: inline in header-only
/// mode, compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::detail {

shm_segment::shm_segment(std::string name, std::size_t bytes, std::uint64_t fingerprint, int users,
                         clock::time_point deadline, const std::string& what)
    : name_(std::move(name)) {
  bytes += sizeof(segment_header);
  int fd = ::shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  const bool creator = fd >= 0;
  if (!creator && errno == EEXIST) fd = ::shm_open(name_.c_str(), O_RDWR, 0600);
  if (fd < 0) throw system_failure(what, "shm_open");
  if (creator && ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ::close(fd);
    ::shm_unlink(name_.c_str());
    throw system_failure(what, "ftruncate (is /dev/shm full?)");
  }
  // Its pages are taken now: a /dev/shm too small for the segment (a container's is 64 MiB by
  // default) fails here, where callers can go without shared memory, not with SIGBUS at the
  // first touch of a page past the limit. A file system without fallocate keeps ftruncate's.
  if (creator) {
    const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
      ::close(fd);
      ::shm_unlink(name_.c_str());
      errno = rc;
      const auto call = fmt::format("posix_fallocate of {} bytes (is /dev/shm smaller?)", bytes);
      throw system_failure(what, call.c_str());
    }
  }
  if (!creator) wait_for_size(fd, bytes, deadline, what);
  // Every page mapped now, in one call, rather than by a fault at each page's first touch in
  // each process: an ipc ring is touched page by page as it cycles, so those faults would land
  // on the first rounds of a job (and a larger ring cycles later).
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) throw system_failure(what, "mmap");
  base_ = static_cast<std::byte*>(p);
  bytes_ = bytes;
  auto* h = header();
  if (creator) {
    h->bytes = bytes;
    h->fingerprint = fingerprint;
    h->users = static_cast<std::uint32_t>(users);
    h->magic.store(segment_header::ready_magic, std::memory_order_release);
  } else {
    while (h->magic.load(std::memory_order_acquire) != segment_header::ready_magic) {
      if (clock::now() > deadline) {
        release();
        throw communicator_error(
            fmt::format("{}: the local rank that created shared memory "
                        "{} never finished it",
                        what, name_));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (h->bytes != bytes || h->fingerprint != fingerprint) {
      release();
      throw usage_error(fmt::format(
          "{}: another local rank of this machine uses this tensor "
          "with a different shape or dtype (shared memory {} holds "
          "{} bytes, this rank needs {})",
          what, name_, h->bytes - sizeof(segment_header), bytes - sizeof(segment_header)));
    }
  }
  if (h->mapped.fetch_add(1, std::memory_order_acq_rel) + 1 == h->users) unlink();
}

}  // namespace bps::detail
