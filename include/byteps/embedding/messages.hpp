#pragma once
/// @file
/// The payloads of a table's frames (`wire::msg::rows_request`, worker -> server, and
/// `wire::msg::rows_answer`, server -> worker). The header's `key` is the table's
/// (`table_key`), `part` 0, `dtype` the table's storage type, and `round` the push's round for
/// a push, or a call number with `call_round_bit` set for a declare and a pull, so that a worker
/// tells their answers from a push's. Little-endian:
///
///   request: [u8 version = 1][u8 op][u16 0][u32 0][u64 count] then by op:
///     declare: the spec: [string name][u64 rows][u32 dim][u8 dtype]
///              [string optimizer][u64 init_scale's bits][u64 seed]; count is the push_rows
///              rounds the worker began (above 0 only when it declares the table again to a
///              server that replaced a dead one: server/tables.hpp)
///     pull:    count ids (u64), each held by the server it goes to, no id twice
///     push:    count ids (u64), then count rows of the table's dtype: their gradients
///     save, load: the checkpoint's directory (count 0): [string dir]
///   answer:    a pull's rows in its ids' order; a save's [u64 rows][u64 bytes][u64 checksum] of
///              the shard file it wrote (embedding/checkpoint.hpp); empty otherwise.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "byteps/core/dtype.hpp"
#include "byteps/embedding/table_spec.hpp"
#include "byteps/wire/codec.hpp"

namespace bps::embedding {

inline constexpr std::uint8_t request_format_version = 1;
inline constexpr std::size_t request_head_bytes = 16;
/// Set in the `round` of every request but a push.
inline constexpr std::uint64_t call_round_bit = 1ull << 63;

enum class op : std::uint8_t { declare = 1, pull = 2, push = 3, save = 4, load = 5 };
inline constexpr std::size_t max_dir_bytes = 4096;
inline constexpr std::size_t save_answer_bytes = 24;

constexpr std::string_view op_name(op o) noexcept {
  switch (o) {
    case op::declare: return "declare_table";
    case op::pull: return "pull_rows";
    case op::push: return "push_rows";
    case op::save: return "save_table";
    case op::load: return "load_table";
  }
  return "unknown";
}

/// A request as a server reads it: views into the frame's payload.
struct request {
  op what = op::pull;
  table_spec spec;                     ///< declare
  std::string dir;                     ///< save, load
  std::span<const std::byte> ids;      ///< pull, push: `count` little-endian u64s
  std::span<const std::byte> values;   ///< push: `count` rows of gradients
  std::uint64_t count = 0;

  std::uint64_t id(std::size_t i) const noexcept { return wire::detail::get_le<std::uint64_t>(ids.data() + 8 * i); }
};

inline void put_head(wire::byte_writer& w, op o, std::uint64_t count) {
  w.put<std::uint8_t>(request_format_version);
  w.put<std::uint8_t>(static_cast<std::uint8_t>(o));
  w.put<std::uint16_t>(0);
  w.put<std::uint32_t>(0);
  w.put<std::uint64_t>(count);
}

inline std::vector<std::byte> encode_declare(const table_spec& s, std::uint64_t pushes_begun = 0) {
  wire::byte_writer w;
  put_head(w, op::declare, pushes_begun);
  w.put_string(s.name);
  w.put<std::uint64_t>(s.rows);
  w.put<std::uint32_t>(s.dim);
  w.put<std::uint8_t>(static_cast<std::uint8_t>(s.type));
  w.put_string(s.optimizer);
  w.put<std::uint64_t>(std::bit_cast<std::uint64_t>(s.init_scale));
  w.put<std::uint64_t>(s.seed);
  return w.take();
}

/// A save's or load's payload.
inline std::vector<std::byte> encode_checkpoint(op o, const std::string& dir) {
  wire::byte_writer w;
  put_head(w, o, 0);
  w.put_string(dir);
  return w.take();
}

/// A pull's or push's payload with room for `count` ids and `value_bytes` after them; the
/// caller writes them at `request_head_bytes` and after.
inline std::vector<std::byte> request_buffer(op o, std::uint64_t count, std::size_t value_bytes) {
  wire::byte_writer w;
  put_head(w, o, count);
  auto b = w.take();
  b.resize(request_head_bytes + 8 * count + value_bytes);
  return b;
}

/// Reads a request for a table of `row_bytes` per row; with 0 (the server holds no such table)
/// a pull or push is read up to its count only. Throws `wire::decode_error` saying what is
/// wrong.
inline request decode_request(std::span<const std::byte> payload, std::size_t row_bytes) {
  wire::byte_reader in(payload);
  request r;
  if (const auto v = in.get<std::uint8_t>(); v != request_format_version)
    throw wire::decode_error("rows_request format " + std::to_string(v) + ", expected " +
                             std::to_string(request_format_version));
  const auto o = in.get<std::uint8_t>();
  if (o < 1 || o > 5) throw wire::decode_error("rows_request of unknown op " + std::to_string(o));
  r.what = static_cast<op>(o);
  in.get<std::uint16_t>();
  in.get<std::uint32_t>();
  r.count = in.get<std::uint64_t>();
  if (r.what == op::declare) {
    r.spec.name = in.get_string(max_name_bytes);
    r.spec.rows = in.get<std::uint64_t>();
    r.spec.dim = in.get<std::uint32_t>();
    const auto t = in.get<std::uint8_t>();
    if (t > static_cast<std::uint8_t>(dtype::int64))
      throw wire::decode_error("rows_request declares dtype " + std::to_string(t));
    r.spec.type = static_cast<dtype>(t);
    r.spec.optimizer = in.get_string(max_optimizer_bytes);
    r.spec.init_scale = std::bit_cast<double>(in.get<std::uint64_t>());
    r.spec.seed = in.get<std::uint64_t>();
    if (!in.done()) throw wire::decode_error("bytes after a rows_request's declaration");
    return r;
  }
  if (r.what == op::save || r.what == op::load) {
    r.dir = in.get_string(max_dir_bytes);
    if (r.dir.empty()) throw wire::decode_error("a checkpoint request without a directory");
    if (!in.done()) throw wire::decode_error("bytes after a checkpoint request's directory");
    return r;
  }
  if (row_bytes == 0) return r;
  const std::size_t rest = payload.size() - request_head_bytes;
  const std::size_t per = 8 + (r.what == op::push ? row_bytes : 0);
  if (r.count > rest / per || rest != r.count * per)
    throw wire::decode_error("a " + std::string(op_name(r.what)) + " request of " +
                             std::to_string(r.count) + " ids in " + std::to_string(rest) +
                             " bytes");
  r.ids = payload.subspan(request_head_bytes, 8 * r.count);
  r.values = payload.subspan(request_head_bytes + 8 * r.count);
  return r;
}

}  // namespace bps::embedding
