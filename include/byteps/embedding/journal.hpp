#pragma once
/// @file
/// `embedding::journal`: how a table's shard survives its server's death (server failover).
/// With failover on, a server writes each change of its shard to a journal file before it
/// answers anyone about it: after a synchronous round, the rows the round changed; after an
/// asynchronous push, the rows it changed and how many pushes of that worker are in. A
/// replacement server that is sent the table's declaration finds the file (same job, same rank)
/// and replays it, so it holds what the dead server had answered for, and at most one round
/// more, which the workers' re-sent pushes then find done.
///
/// File `<dir>/<table>-<key>.job-<job id>.journal-<s>-of-<n>`, little-endian:
///   [8 bytes "BPSJRN1\0"][u64 job id][u32 server][u32 servers][u32 length][the declaration,
///   as embedding/messages.hpp encodes it], then records, each
///   [u64 length][u8 kind][u64 round][u32 n][n x (u32 process, u64 pushes)][string loaded]
///   [rows][u64 FNV-1a of the bytes from kind to rows]
/// `kind` 1 is a snapshot (every row held: `shard::serialise`), 2 the rows one change made
/// (`shard::serialise_rows`); `round` is the shard's next synchronous round after it; the
/// (process, pushes) pairs are asynchronous training's counts (all of them in a snapshot, the
/// pushing worker's in a change); `loaded` the directory of the last `load_table` (a snapshot;
/// empty in a change). A record cut off by the server's death fails its length or
/// its checksum, and replay stops before it: the change it held was answered to nobody.
///
/// The file starts with a snapshot and grows by one record per change; once the changes
/// outweigh the snapshot (twice its bytes plus 1 MiB) the server writes a fresh file with one
/// snapshot and renames it over the old. Records reach the operating system before any answer
/// leaves (a killed process loses none); nothing is synced to the disk (a host that loses
/// power may).

#include <fcntl.h>
#include <unistd.h>

#include <fmt/core.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "byteps/core/error.hpp"
#include "byteps/embedding/checkpoint.hpp"
#include "byteps/embedding/messages.hpp"
#include "byteps/embedding/table_spec.hpp"
#include "byteps/wire/codec.hpp"

namespace bps::embedding {

inline constexpr char journal_magic[8] = {'B', 'P', 'S', 'J', 'R', 'N', '1', '\0'};

/// One record as written and as replayed.
struct journal_record {
  enum class kind : std::uint8_t { snapshot = 1, change = 2 };
  kind what = kind::change;
  std::uint64_t round = 1;  ///< the shard's next synchronous round after this record
  /// Asynchronous training: pushes applied, by worker process (`process_id`).
  std::map<std::uint32_t, std::uint64_t> pushes;
  std::string loaded;  ///< a snapshot: the directory the shard was last loaded from
  std::vector<std::byte> rows;  ///< `shard::serialise` (a snapshot) or `serialise_rows`
};

class journal {
 public:
  /// Where server `server` of `servers` journals `table` in job `job_id`.
  static std::string file(const std::string& dir, const std::string& table, std::uint64_t job_id,
                          int server, int servers) {
    return fmt::format("{}/{}.job-{:016x}.journal-{}-of-{}", dir, file_stem(table), job_id, server,
                       servers);
  }

  /// Every whole record of the journal at `path`, checked against the job, this server's place
  /// and `spec`; stops before a record cut off by the writer's death. `usage_error` naming the
  /// file when it cannot be read or belongs elsewhere.
  static std::vector<journal_record> read(const std::string& path, const table_spec& spec,
                                          std::uint64_t job_id, int server, int servers) {
    const auto raw = read_whole_file(path, "journal");
    const std::span<const std::byte> b(reinterpret_cast<const std::byte*>(raw.data()), raw.size());
    const auto bad = [&](const std::string& why) {
      return usage_error(fmt::format("the journal {} {}", path, why));
    };
    if (b.size() < sizeof journal_magic ||
        std::memcmp(b.data(), journal_magic, sizeof journal_magic) != 0)
      throw bad("is not a byteps table journal");
    std::vector<journal_record> records;
    try {
      wire::byte_reader r(b.subspan(sizeof journal_magic));
      const auto file_job = r.get<std::uint64_t>();
      const auto file_server = r.get<std::uint32_t>();
      const auto file_servers = r.get<std::uint32_t>();
      if (file_job != job_id || file_server != static_cast<std::uint32_t>(server) ||
          file_servers != static_cast<std::uint32_t>(servers))
        throw bad(fmt::format("is server {} of {} in job {:016x}, not server {} of {} in job "
                              "{:016x}",
                              file_server, file_servers, file_job, server, servers, job_id));
      if (const auto diff = first_difference(get_declaration(r), spec); !diff.empty())
        throw bad(fmt::format("was written for another declaration ({}: the file's, then this "
                              "one's)",
                              diff));
      std::size_t at = b.size() - r.remaining();
      while (b.size() - at >= 8) {
        const auto size = wire::detail::get_le<std::uint64_t>(b.data() + at);
        if (size > b.size() - at - 8 || b.size() - at - 8 - size < 8) break;  // cut off
        const auto body = b.subspan(at + 8, size);
        if (fnv1a(body) != wire::detail::get_le<std::uint64_t>(body.data() + size)) break;
        records.push_back(decode_record(body));
        at += 8 + size + 8;
      }
    } catch (const wire::decode_error& e) {
      throw bad(fmt::format("is malformed: {}", e.what()));
    }
    if (records.empty() || records.front().what != journal_record::kind::snapshot)
      throw bad("does not start with a snapshot");
    return records;
  }

  journal() = default;
  journal(const journal&) = delete;
  journal& operator=(const journal&) = delete;
  journal(journal&& o) noexcept { *this = std::move(o); }
  journal& operator=(journal&& o) noexcept {
    if (this != &o) {
      close();
      path_ = std::move(o.path_);
      header_ = std::move(o.header_);
      fd_ = std::exchange(o.fd_, -1);
      bytes_ = o.bytes_;
      snapshot_bytes_ = o.snapshot_bytes_;
    }
    return *this;
  }
  ~journal() { close(); }

  /// A journal at `path` for `spec`; nothing is written until `start`.
  journal(std::string path, const table_spec& spec, std::uint64_t job_id, int server,
          int servers)
      : path_(std::move(path)) {
    wire::byte_writer w;
    auto& b = w.bytes();
    b.insert(b.end(), reinterpret_cast<const std::byte*>(journal_magic),
             reinterpret_cast<const std::byte*>(journal_magic) + sizeof journal_magic);
    w.put<std::uint64_t>(job_id);
    w.put<std::uint32_t>(static_cast<std::uint32_t>(server));
    w.put<std::uint32_t>(static_cast<std::uint32_t>(servers));
    put_declaration(w, spec);
    header_ = w.take();
  }

  /// Writes a fresh file holding `snapshot` only (to a temporary name, then renamed over the
  /// old one) and appends to it from now on. `usage_error` naming the file on failure.
  void start(const journal_record& snapshot) {
    std::vector<std::byte> b = header_;
    append_record(b, snapshot);
    const std::string temporary = path_ + ".tmp";
    const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw failed("create the journal " + temporary);
    if (!write_all(fd, b)) {
      const auto e = failed("write the journal " + temporary);
      ::close(fd);
      throw e;
    }
    if (std::rename(temporary.c_str(), path_.c_str()) != 0) {
      const auto e = failed(fmt::format("rename the journal {} to {}", temporary, path_));
      ::close(fd);
      throw e;
    }
    close();
    fd_ = fd;
    bytes_ = b.size();
    snapshot_bytes_ = b.size();
  }

  /// Appends one change; true when the journal has grown enough that the caller should
  /// `start` it again from a snapshot. `usage_error` naming the file on failure.
  bool append(const journal_record& change) {
    std::vector<std::byte> b;
    append_record(b, change);
    if (fd_ < 0 || !write_all(fd_, b)) throw failed("append to the journal " + path_);
    bytes_ += b.size();
    return bytes_ - snapshot_bytes_ > 2 * snapshot_bytes_ + (std::size_t{1} << 20);
  }

  /// Bytes in the file now.
  std::size_t bytes() const noexcept { return bytes_; }

  /// The job ended well: the file is no longer needed.
  void remove() {
    close();
    if (!path_.empty()) ::unlink(path_.c_str());
  }

 private:
  static journal_record decode_record(std::span<const std::byte> body) {
    wire::byte_reader r(body);
    journal_record rec;
    const auto k = r.get<std::uint8_t>();
    if (k != 1 && k != 2) throw wire::decode_error(fmt::format("a record of kind {}", k));
    rec.what = static_cast<journal_record::kind>(k);
    rec.round = r.get<std::uint64_t>();
    const auto n = r.get<std::uint32_t>();
    if (n > r.remaining() / 12) throw wire::decode_error(fmt::format("{} push counts", n));
    for (std::uint32_t i = 0; i < n; ++i) {
      const auto process = r.get<std::uint32_t>();
      rec.pushes[process] = r.get<std::uint64_t>();
    }
    rec.loaded = r.get_string(max_dir_bytes);
    const auto rows = body.subspan(body.size() - r.remaining());
    rec.rows.assign(rows.begin(), rows.end());
    return rec;
  }

  static void append_record(std::vector<std::byte>& out, const journal_record& rec) {
    wire::byte_writer w;
    w.put<std::uint8_t>(static_cast<std::uint8_t>(rec.what));
    w.put<std::uint64_t>(rec.round);
    w.put<std::uint32_t>(static_cast<std::uint32_t>(rec.pushes.size()));
    for (const auto& [process, n] : rec.pushes) {
      w.put<std::uint32_t>(process);
      w.put<std::uint64_t>(n);
    }
    w.put_string(rec.loaded);
    auto body = w.take();
    body.insert(body.end(), rec.rows.begin(), rec.rows.end());
    wire::byte_writer framed;
    framed.put<std::uint64_t>(body.size());
    auto& b = framed.bytes();
    b.insert(b.end(), body.begin(), body.end());
    framed.put<std::uint64_t>(fnv1a(body));
    const auto& f = framed.bytes();
    out.insert(out.end(), f.begin(), f.end());
  }

  static bool write_all(int fd, std::span<const std::byte> b) {
    while (!b.empty()) {
      const auto n = ::write(fd, b.data(), b.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      b = b.subspan(static_cast<std::size_t>(n));
    }
    return true;
  }

  static usage_error failed(const std::string& what) {
    return usage_error(fmt::format("cannot {}: {}", what, std::strerror(errno)));
  }

  void close() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  std::string path_;
  std::vector<std::byte> header_;
  int fd_ = -1;
  std::size_t bytes_ = 0, snapshot_bytes_ = 0;
};

}  // namespace bps::embedding
