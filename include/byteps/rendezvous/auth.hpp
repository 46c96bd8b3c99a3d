#pragma once
/// @file
/// Proof of the job's token (BYTEPS_JOB_TOKEN) on a new connection, by challenge-response.
///
/// A listener (the scheduler, a server) sends every connection it accepts a `challenge` frame
/// holding a fresh random nonce (`fresh_nonce`, OpenSSL's RAND_bytes). The connection's first
/// frame must be its hello, which carries `prove(token, purpose, nonce, message)`: an
/// HMAC-SHA256 keyed by the token over a domain tag, the purpose (which listener and which kind
/// of hello: `scheduler_hello`, `server_hello`), the nonce and the hello's own bytes. So a hello
/// proves the token without sending it or anything that can be replayed: the next connection
/// gets another nonce. `verify` compares in constant time (CRYPTO_memcmp).
///
/// The MAC is OpenSSL's libcrypto (`OpenSSL::Crypto`), not a hand-written one: a well-kept,
/// widely reviewed implementation is worth a dependency. With no token (""), the proof is keyed
/// by the empty string: it still binds the hello to its connection, and still tells apart a
/// node that has a token from one that has none.

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "byteps/core/error.hpp"
#include "byteps/core/linkage.hpp"

namespace bps::rendezvous {

inline constexpr std::size_t nonce_bytes = 32;
inline constexpr std::size_t proof_bytes = 32;  // HMAC-SHA256
using nonce = std::array<std::byte, nonce_bytes>;
using proof = std::array<std::byte, proof_bytes>;

/// What a proof is for: a hello to the scheduler, or a worker's hello to a server. A proof for
/// one is never valid for the other.
enum class purpose : std::uint8_t { scheduler_hello = 1, server_hello = 2 };

/// A fresh random nonce. Throws `communicator_error` when OpenSSL has no randomness to give.
BYTEPS_DECL nonce fresh_nonce();

/// HMAC-SHA256, keyed by `token`, over the domain tag, `why`, the nonce and `message`.
BYTEPS_DECL proof prove(std::string_view token, purpose why, const nonce& n,
                        std::span<const std::byte> message);

/// True when `given` is the proof of `message` for `why` and `n` under `token`; constant time.
BYTEPS_DECL bool verify(std::string_view token, purpose why, const nonce& n,
                        std::span<const std::byte> message, std::span<const std::byte> given);

}  // namespace bps::rendezvous

#if BYTEPS_INCLUDE_BODIES
#include "byteps/rendezvous/impl/auth.hpp"
#endif
