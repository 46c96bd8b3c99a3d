#pragma once
/// @file
/// A table's checkpoint: one file per server shard, written and read by that server, and a
/// manifest written and read by a worker (`Communicator::save_table`, `load_table`). The
/// directory must be the same path for the servers and the worker that saves or loads (one
/// machine, or a shared file system).
///
/// Shard file `<dir>/<table>-<key>.shard-<s>-of-<n>`, little-endian:
///   [8 bytes "BPSTAB1\0"][u32 server][u32 servers][u32 length][the declaration, as
///   embedding/messages.hpp encodes it][u64 length][the shard (embedding::shard::serialise)]
///   [u64 FNV-1a of every byte before it]
/// written to a temporary name first and renamed, so a file that exists is whole.
///
/// Manifest `<dir>/<table>-<key>.manifest`, text, one `key value` a line: the format line, the
/// declaration's fields, `servers`, and a `shard` line per server (its file, rows, bytes and
/// checksum), for people and for `load_table`'s checks.

#include <fmt/core.h>

#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "byteps/core/error.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/embedding/messages.hpp"
#include "byteps/embedding/placement.hpp"
#include "byteps/embedding/table_spec.hpp"
#include "byteps/wire/codec.hpp"

namespace bps::embedding {

inline constexpr char shard_magic[8] = {'B', 'P', 'S', 'T', 'A', 'B', '1', '\0'};
inline constexpr std::string_view manifest_format = "byteps embedding table checkpoint 1";

/// What a server reports of the shard file it wrote.
struct shard_summary {
  std::uint64_t rows = 0, bytes = 0, checksum = 0;
};

/// FNV-1a of `b`, as core/keys.hpp hashes a tensor's name.
inline std::uint64_t fnv1a(std::span<const std::byte> b) noexcept {
  return tensor_key(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
}

/// The table's files' common stem: its name with anything but letters, digits, '.', '-' and '_'
/// made '_', then its key, so that two names never share files.
inline std::string file_stem(const std::string& table) {
  std::string safe = table;
  for (char& c : safe)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) c = '_';
  return fmt::format("{}-{:016x}", safe, table_key(table));
}
inline std::string shard_file(const std::string& dir, const std::string& table, int server,
                              int servers) {
  return fmt::format("{}/{}.shard-{}-of-{}", dir, file_stem(table), server, servers);
}
inline std::string manifest_file(const std::string& dir, const std::string& table) {
  return fmt::format("{}/{}.manifest", dir, file_stem(table));
}

/// The bytes of the file at `path`, a `what` ("shard file", "journal"); `usage_error` naming
/// both when it cannot be read.
inline std::vector<char> read_whole_file(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw usage_error(fmt::format("cannot read the {} {}: {}", what, path, std::strerror(errno)));
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// A file's declaration of its table: [u32 length][the declaration, as embedding/messages.hpp
/// encodes it]. Shard files and journals (embedding/journal.hpp) start with it.
inline void put_declaration(wire::byte_writer& w, const table_spec& spec) {
  const auto declaration = encode_declare(spec);
  w.put<std::uint32_t>(static_cast<std::uint32_t>(declaration.size()));
  auto& b = w.bytes();
  b.insert(b.end(), declaration.begin(), declaration.end());
}

/// Reads what `put_declaration` wrote; throws `wire::decode_error`.
inline table_spec get_declaration(wire::byte_reader& r) {
  std::vector<std::byte> declaration(r.get<std::uint32_t>());
  for (auto& x : declaration) x = static_cast<std::byte>(r.get<std::uint8_t>());
  return decode_request(declaration, 0).spec;
}

/// Writes `shard` (serialised) of `spec` as server `server` of `servers` to `path`; throws
/// `usage_error` naming the file when the system refuses.
inline shard_summary write_shard(const std::string& path, const table_spec& spec, int server,
                                 int servers, std::uint64_t rows,
                                 std::span<const std::byte> shard) {
  wire::byte_writer w;
  auto& b = w.bytes();
  b.insert(b.end(), reinterpret_cast<const std::byte*>(shard_magic),
           reinterpret_cast<const std::byte*>(shard_magic) + sizeof shard_magic);
  w.put<std::uint32_t>(static_cast<std::uint32_t>(server));
  w.put<std::uint32_t>(static_cast<std::uint32_t>(servers));
  put_declaration(w, spec);
  w.put<std::uint64_t>(shard.size());
  b.insert(b.end(), shard.begin(), shard.end());
  const auto checksum = fnv1a(b);
  w.put<std::uint64_t>(checksum);
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    out.flush();
    if (!out)
      throw usage_error(fmt::format("cannot write the shard file {}: {}", temporary,
                                    std::strerror(errno)));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0)
    throw usage_error(fmt::format("cannot rename {} to {}: {}", temporary, path,
                                  std::strerror(errno)));
  return {rows, b.size(), checksum};
}

/// The shard in `path`, checked against `spec` and this server's place; `usage_error` naming
/// the file and what is wrong otherwise.
inline std::vector<std::byte> read_shard(const std::string& path, const table_spec& spec,
                                         int server, int servers) {
  const auto raw = read_whole_file(path, "shard file");
  const std::span<const std::byte> b(reinterpret_cast<const std::byte*>(raw.data()), raw.size());
  const auto bad = [&](const std::string& why) {
    return usage_error(fmt::format("the shard file {} {}", path, why));
  };
  if (b.size() < sizeof shard_magic + 8 || std::memcmp(b.data(), shard_magic, sizeof shard_magic) != 0)
    throw bad("is not a byteps table shard");
  const auto body = b.first(b.size() - 8);
  if (fnv1a(body) != wire::detail::get_le<std::uint64_t>(b.data() + body.size()))
    throw bad("is damaged: its checksum does not match its bytes");
  try {
    wire::byte_reader r(body.subspan(sizeof shard_magic));
    const auto file_server = r.get<std::uint32_t>();
    const auto file_servers = r.get<std::uint32_t>();
    if (file_servers != static_cast<std::uint32_t>(servers) ||
        file_server != static_cast<std::uint32_t>(server))
      throw bad(fmt::format("holds server {} of {}, not server {} of {}", file_server,
                            file_servers, server, servers));
    if (const auto diff = first_difference(get_declaration(r), spec); !diff.empty())
      throw bad(fmt::format("was saved from another declaration ({}: the file's, then the job's)", diff));
    const auto size = r.get<std::uint64_t>();
    const std::size_t at = body.size() - size;
    if (size > body.size() || at < sizeof shard_magic) throw bad("ends early");
    return {body.begin() + static_cast<std::ptrdiff_t>(at), body.end()};
  } catch (const wire::decode_error& e) {
    throw bad(fmt::format("is malformed: {}", e.what()));
  }
}

/// The manifest's text for `spec` saved by `servers` servers.
inline std::string manifest_text(const table_spec& spec, const std::vector<shard_summary>& shards,
                                 const std::vector<std::string>& files) {
  std::string t = fmt::format("{}\nname {}\nrows {}\ndim {}\ntype {}\noptimizer {}\n"
                              "init_scale {:.17g}\nseed {}\nservers {}\n",
                              manifest_format, spec.name, spec.rows, spec.dim,
                              dtype_name(spec.type), spec.optimizer, spec.init_scale, spec.seed,
                              shards.size());
  for (std::size_t s = 0; s < shards.size(); ++s)
    t += fmt::format("shard {} {} rows {} bytes {} checksum {:016x}\n", s, files[s],
                     shards[s].rows, shards[s].bytes, shards[s].checksum);
  return t;
}

/// The number of servers a manifest was saved with; `usage_error` naming the file otherwise.
inline int manifest_servers(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw usage_error(fmt::format("cannot read the manifest {}: {}", path, std::strerror(errno)));
  std::string line;
  if (!std::getline(in, line) || line != manifest_format)
    throw usage_error(fmt::format("{} is not a byteps table manifest (its first line is not '{}')",
                                  path, manifest_format));
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string key;
    int n = 0;
    if (words >> key && key == "servers" && words >> n && n > 0) return n;
  }
  throw usage_error(fmt::format("the manifest {} has no 'servers' line", path));
}

}  // namespace bps::embedding
