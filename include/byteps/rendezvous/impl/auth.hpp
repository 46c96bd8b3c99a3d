#pragma once
/// @file
/// The bodies of rendezvous/auth.hpp's functions that are not templates: inline in header-only
/// mode, compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::rendezvous {

nonce fresh_nonce() {
  nonce n{};
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), static_cast<int>(n.size())) != 1)
    throw communicator_error("OpenSSL RAND_bytes failed: no random nonce for a new connection");
  return n;
}

proof prove(std::string_view token, purpose why, const nonce& n,
            std::span<const std::byte> message) {
  static constexpr std::string_view tag = "byteps hello proof v1";
  std::vector<unsigned char> data;
  data.reserve(tag.size() + 1 + n.size() + message.size());
  data.insert(data.end(), tag.begin(), tag.end());
  data.push_back(static_cast<unsigned char>(why));
  for (auto b : n) data.push_back(static_cast<unsigned char>(b));
  for (auto b : message) data.push_back(static_cast<unsigned char>(b));
  proof out{};
  unsigned int len = 0;
  static const unsigned char no_key = 0;
  const auto* key = token.empty() ? &no_key : reinterpret_cast<const unsigned char*>(token.data());
  if (HMAC(EVP_sha256(), key, static_cast<int>(token.size()), data.data(), data.size(),
           reinterpret_cast<unsigned char*>(out.data()), &len) == nullptr ||
      len != proof_bytes)
    throw communicator_error("OpenSSL HMAC-SHA256 failed while proving the job token");
  return out;
}

bool verify(std::string_view token, purpose why, const nonce& n, std::span<const std::byte> message,
            std::span<const std::byte> given) {
  if (given.size() != proof_bytes) return false;
  const proof expected = prove(token, why, n, message);
  return CRYPTO_memcmp(expected.data(), given.data(), proof_bytes) == 0;
}

}  // namespace bps::rendezvous
