#pragma once
/// @file
/// Writing one frame (a header and its payload) to a socket in two parts, as
/// `basic_tcp_link::send` does for small frames (tcp_link.hpp): first from the sending thread,
/// without blocking, as much as the socket takes; then, if anything is left, the link's strand
/// writes `unwritten(...)`.

#include <array>
#include <asio/buffer.hpp>
#include <cstddef>
#include <span>

#include <sys/socket.h>
#include <sys/uio.h>

namespace bps::transport {

/// Whether this system can write from a caller's thread: a write to a peer that has gone must
/// fail there, not raise SIGPIPE (MSG_NOSIGNAL).
#ifdef MSG_NOSIGNAL
inline constexpr bool can_write_from_caller = true;
#else
inline constexpr bool can_write_from_caller = false;
#endif

/// Writes what socket `fd` takes of `header` then `payload` now, never blocking: the bytes
/// written. An error writes nothing here; whoever writes the rest meets it again and reports it.
inline std::size_t write_without_blocking(int fd, std::span<const std::byte> header,
                                          std::span<const std::byte> payload) noexcept {
#ifdef MSG_NOSIGNAL
  iovec parts[2] = {{const_cast<std::byte*>(header.data()), header.size()},
                    {const_cast<std::byte*>(payload.data()), payload.size()}};
  msghdr message{};
  message.msg_iov = parts;
  message.msg_iovlen = payload.empty() ? 1 : 2;
  const ssize_t n = ::sendmsg(fd, &message, MSG_DONTWAIT | MSG_NOSIGNAL);
  return n > 0 ? static_cast<std::size_t>(n) : 0;
#else
  (void)fd, (void)header, (void)payload;
  return 0;
#endif
}

/// What is left of a frame once its first `written` bytes went: the rest of the header, then the
/// rest of the payload (either may be empty).
inline std::array<asio::const_buffer, 2> unwritten(std::span<const std::byte> header,
                                                   std::span<const std::byte> payload,
                                                   std::size_t written) noexcept {
  const std::size_t from_header = written < header.size() ? written : header.size();
  return {asio::buffer(header.data(), header.size()) + from_header,
          asio::buffer(payload.data(), payload.size()) + (written - from_header)};
}

}  // namespace bps::transport
