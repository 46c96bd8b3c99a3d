#pragma once
/// @file
/// The payloads of `transport::ipc`'s control frames (ipc.hpp), each a type of its own with its
/// encoding, instead of header fields borrowed for other meanings. `ipc_able` and `ipc_accept`
/// carry nothing.
///
///   ipc_offer           ring_offer      the ring this end sends through: its name, size, and
///                                       the fingerprint its control block starts with
///   ipc_payload         ring_place      a payload's place in that ring, right before its header
///   ipc_share           share_offer     memory this end shares: its id, name and size
///   ipc_share_accept    share_accept    the peer mapped that id (no answer: it could not)
///   ipc_shared_payload  shared_payload  a payload's place in shared memory, right before its
///                                       header
///
/// A payload that does not decode whole throws `wire::decode_error`.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "byteps/wire/codec.hpp"

namespace bps::transport::ipc_detail {

struct ring_offer {
  std::string name;
  std::uint64_t bytes = 0;
  std::uint64_t fingerprint = 0;
};

struct ring_place {
  std::uint64_t pos = 0;
  std::uint64_t bytes = 0;
};

struct share_offer {
  std::uint64_t id = 0;
  std::string name;
  std::uint64_t bytes = 0;
};

struct share_accept {
  std::uint64_t id = 0;
};

struct shared_payload {
  std::uint64_t id = 0;
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
};

inline std::vector<std::byte> encode(const ring_offer& m) {
  wire::byte_writer w;
  w.put_string(m.name);
  w.put(m.bytes);
  w.put(m.fingerprint);
  return w.take();
}
inline std::vector<std::byte> encode(const ring_place& m) {
  wire::byte_writer w;
  w.put(m.pos);
  w.put(m.bytes);
  return w.take();
}
inline std::vector<std::byte> encode(const share_offer& m) {
  wire::byte_writer w;
  w.put(m.id);
  w.put_string(m.name);
  w.put(m.bytes);
  return w.take();
}
inline std::vector<std::byte> encode(const share_accept& m) {
  wire::byte_writer w;
  w.put(m.id);
  return w.take();
}
inline std::vector<std::byte> encode(const shared_payload& m) {
  wire::byte_writer w;
  w.put(m.id);
  w.put(m.offset);
  w.put(m.bytes);
  return w.take();
}

namespace messages_detail {
inline void whole(const wire::byte_reader& r, const char* what) {
  if (!r.done()) throw wire::decode_error(std::string(what) + " has bytes past its end");
}
}  // namespace messages_detail

inline ring_offer decode_ring_offer(std::span<const std::byte> in) {
  wire::byte_reader r(in);
  ring_offer m;
  m.name = r.get_string(255);
  m.bytes = r.get<std::uint64_t>();
  m.fingerprint = r.get<std::uint64_t>();
  messages_detail::whole(r, "an ipc_offer");
  return m;
}
inline ring_place decode_ring_place(std::span<const std::byte> in) {
  wire::byte_reader r(in);
  ring_place m;
  m.pos = r.get<std::uint64_t>();
  m.bytes = r.get<std::uint64_t>();
  messages_detail::whole(r, "an ipc_payload");
  return m;
}
inline share_offer decode_share_offer(std::span<const std::byte> in) {
  wire::byte_reader r(in);
  share_offer m;
  m.id = r.get<std::uint64_t>();
  m.name = r.get_string(255);
  m.bytes = r.get<std::uint64_t>();
  messages_detail::whole(r, "an ipc_share");
  return m;
}
inline share_accept decode_share_accept(std::span<const std::byte> in) {
  wire::byte_reader r(in);
  share_accept m;
  m.id = r.get<std::uint64_t>();
  messages_detail::whole(r, "an ipc_share_accept");
  return m;
}
inline shared_payload decode_shared_payload(std::span<const std::byte> in) {
  wire::byte_reader r(in);
  shared_payload m;
  m.id = r.get<std::uint64_t>();
  m.offset = r.get<std::uint64_t>();
  m.bytes = r.get<std::uint64_t>();
  messages_detail::whole(r, "an ipc_shared_payload");
  return m;
}

}  // namespace bps::transport::ipc_detail
