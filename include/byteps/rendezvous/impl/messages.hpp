#pragma once
/// @file
/// The bodies of rendezvous/messages.hpp's functions that are not templates: inline in header-only
/// mode, compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::rendezvous {

std::vector<std::byte> encode(const hello& h) {
  wire::byte_writer w;
  w.put(h.protocol);
  w.put(static_cast<std::uint8_t>(h.node_role));
  w.put(h.requested_rank);
  w.put(h.local_rank);
  w.put(h.local_size);
  w.put_string(h.host);
  w.put(h.port);
  w.put(h.partition_bytes);
  w.put(h.num_workers);
  w.put(h.num_servers);
  w.put_string(h.key_hash);
  w.put(h.mixed_mode);
  w.put_flag(h.failover);
  w.put_flag(h.standby);
  w.put_flag(h.async_mode);
  w.put(h.staleness);
  w.put(h.min_workers);
  w.put(h.max_workers);
  w.put_flag(h.shares_memory);
  return w.take();
}

hello decode_hello(std::span<const std::byte> in) {
  wire::byte_reader r(in);
  hello h;
  h.protocol = r.get<std::uint32_t>();
  if (h.protocol != protocol_version) return h;  // the rest may be laid out differently
  auto rl = r.get<std::uint8_t>();
  if (rl > static_cast<std::uint8_t>(role::worker)) throw wire::decode_error("unknown role");
  h.node_role = static_cast<role>(rl);
  h.requested_rank = r.get<std::int32_t>();
  h.local_rank = r.get<std::int32_t>();
  h.local_size = r.get<std::int32_t>();
  if (h.local_size < 1 || h.local_size > 1024 || h.local_rank < 0 || h.local_rank >= h.local_size)
    throw wire::decode_error("local rank outside the local size");
  h.host = r.get_string(256);
  h.port = r.get<std::uint16_t>();
  h.partition_bytes = r.get<std::uint64_t>();
  h.num_workers = r.get<std::int32_t>();
  h.num_servers = r.get<std::int32_t>();
  h.key_hash = r.get_string(32);
  h.mixed_mode = r.get_flag("mixed mode") ? 1 : 0;
  h.failover = r.get_flag("failover");
  h.standby = r.get_flag("standby");
  if (h.standby && h.node_role != role::server) throw wire::decode_error("only servers stand by");
  h.async_mode = r.get_flag("async");
  h.staleness = r.get<std::int64_t>();
  if (h.staleness < -1) throw wire::decode_error("staleness below -1 (unbounded)");
  h.min_workers = r.get<std::int32_t>();
  h.max_workers = r.get<std::int32_t>();
  if (h.min_workers < 0 || h.max_workers < 0)
    throw wire::decode_error("a negative BYTEPS_MIN_NUM_WORKER or BYTEPS_MAX_NUM_WORKER");
  h.shares_memory = r.get_flag("shares_memory");
  if (!r.done()) throw wire::decode_error("trailing bytes after hello");
  return h;
}

std::vector<std::byte> encode_proved(const hello& h, std::string_view token, const nonce& n) {
  auto body = encode(h);
  const auto p = prove(token, purpose::scheduler_hello, n, body);
  body.insert(body.end(), p.begin(), p.end());
  return body;
}

std::optional<std::uint32_t> hello_protocol(std::span<const std::byte> in) {
  if (in.size() < 4) return std::nullopt;
  wire::byte_reader r(in.first(4));
  return r.get<std::uint32_t>();
}

proof peer_hello_proof(std::string_view token, const nonce& n, std::uint32_t machine,
                       std::uint32_t local_rank) {
  wire::byte_writer w;
  w.put(machine);
  w.put(local_rank);
  const auto who = w.take();
  return prove(token, purpose::server_hello, n, who);
}

bool verify_peer_hello(std::string_view token, const nonce& n, std::uint32_t machine,
                       std::uint32_t local_rank, std::span<const std::byte> given) {
  const auto expected = peer_hello_proof(token, n, machine, local_rank);
  return given.size() == proof_bytes &&
         CRYPTO_memcmp(expected.data(), given.data(), proof_bytes) == 0;
}

std::vector<std::byte> encode(const welcome& m) {
  wire::byte_writer w;
  w.put(m.rank);
  w.put(m.num_workers);
  w.put(m.num_servers);
  w.put(m.global_rank);
  w.put(m.global_size);
  w.put(m.slices);
  w.put(m.job_id);
  w.put(static_cast<std::uint32_t>(m.servers.size()));
  for (const auto& a : m.servers) {
    w.put_string(a.host);
    w.put(a.port);
  }
  w.put(m.epoch);
  w.put_flag(m.in_shared_memory);
  return w.take();
}

welcome decode_welcome(std::span<const std::byte> in) {
  wire::byte_reader r(in);
  welcome m;
  m.rank = r.get<std::int32_t>();
  m.num_workers = r.get<std::int32_t>();
  m.num_servers = r.get<std::int32_t>();
  m.global_rank = r.get<std::int32_t>();
  m.global_size = r.get<std::int32_t>();
  m.slices = r.get<std::int32_t>();
  m.job_id = r.get<std::uint64_t>();
  if (m.slices < 1 || m.slices > 1024) throw wire::decode_error("slice count out of range");
  auto n = r.get<std::uint32_t>();
  if (n > 65536) throw wire::decode_error("server table too large");
  for (std::uint32_t i = 0; i < n; ++i) {
    address a;
    a.host = r.get_string(256);
    a.port = r.get<std::uint16_t>();
    m.servers.push_back(std::move(a));
  }
  m.epoch = r.get<std::uint64_t>();
  m.in_shared_memory = r.get_flag("in_shared_memory");
  if (!r.done()) throw wire::decode_error("trailing bytes after welcome");
  return m;
}

std::vector<std::byte> encode(const server_replaced& m) {
  wire::byte_writer w;
  w.put(m.rank);
  w.put_string(m.where.host);
  w.put(m.where.port);
  return w.take();
}

server_replaced decode_server_replaced(std::span<const std::byte> in) {
  wire::byte_reader r(in);
  server_replaced m;
  m.rank = r.get<std::int32_t>();
  m.where.host = r.get_string(256);
  m.where.port = r.get<std::uint16_t>();
  if (m.rank < 0) throw wire::decode_error("negative server rank");
  if (!r.done()) throw wire::decode_error("trailing bytes after server_replaced");
  return m;
}

std::vector<std::byte> encode(const membership& m) {
  wire::byte_writer w;
  w.put(m.epoch);
  w.put(static_cast<std::uint32_t>(m.members.size()));
  for (auto machine : m.members) w.put(machine);
  for (auto size : m.local_sizes) w.put(size);
  w.put(m.processes);
  w.put(m.removed);
  w.put_string(m.why);
  w.put_flag(m.lost);
  w.put(m.joined);
  w.put(m.boundary);
  return w.take();
}

membership decode_membership(std::span<const std::byte> in) {
  wire::byte_reader r(in);
  membership m;
  m.epoch = r.get<std::uint64_t>();
  const auto n = r.get<std::uint32_t>();
  if (n > (1u << 20)) throw wire::decode_error("more members than worker machines can be");
  for (std::uint32_t i = 0; i < n; ++i) {
    const auto machine = r.get<std::int32_t>();
    if (machine < 0 || (!m.members.empty() && machine <= m.members.back()))
      throw wire::decode_error("members are not ascending machine numbers");
    m.members.push_back(machine);
  }
  std::int64_t sum = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    const auto size = r.get<std::int32_t>();
    if (size < 1 || size > 1024) throw wire::decode_error("a member's local size is not 1 .. 1024");
    m.local_sizes.push_back(size);
    sum += size;
  }
  m.processes = r.get<std::int32_t>();
  if (m.processes != sum)
    throw wire::decode_error("the worker processes are not the sum of the members' local sizes");
  m.removed = r.get<std::int32_t>();
  if (m.removed < -1) throw wire::decode_error("removed machine below -1 (none)");
  m.why = r.get_string(4096);
  m.lost = r.get_flag("membership's lost");
  m.joined = r.get<std::int32_t>();
  if (m.joined < -1) throw wire::decode_error("joined machine below -1 (none)");
  if (m.joined >= 0 && !std::binary_search(m.members.begin(), m.members.end(), m.joined))
    throw wire::decode_error("the joined machine is not among the members");
  m.boundary = r.get<std::uint64_t>();
  if (!r.done()) throw wire::decode_error("trailing bytes after membership");
  return m;
}

std::optional<std::string> first_difference(const hello& mine, const hello& theirs,
                                            const std::string& where) {
  // Another generation's hello may lay its role out elsewhere: it is only "a peer".
  if (theirs.protocol != mine.protocol)
    return fmt::format(
        "byteps protocol differs: the peer at {} speaks {}, the scheduler speaks "
        "{}; run the same byteps version everywhere",
        where, theirs.protocol, mine.protocol);
  const auto who = fmt::format("the {} at {}", role_name(theirs.node_role), where);
  auto differ = [&](const char* variable, auto a, auto b) {
    return fmt::format("{} differs: {} has {}, the scheduler has {}", variable, who, a, b);
  };
  if (theirs.partition_bytes != mine.partition_bytes) {
    auto size = [](std::uint64_t b) {
      return b == 0 ? std::string("0 (auto)") : std::to_string(b);
    };
    return differ("BYTEPS_PARTITION_BYTES", size(theirs.partition_bytes),
                  size(mine.partition_bytes));
  }
  if (theirs.num_workers != mine.num_workers)
    return differ("DMLC_NUM_WORKER", theirs.num_workers, mine.num_workers);
  if (theirs.num_servers != mine.num_servers)
    return differ("DMLC_NUM_SERVER", theirs.num_servers, mine.num_servers);
  if (theirs.failover != mine.failover) {
    auto on_off = [](bool on) { return on ? "failover on (> 0)" : "failover off (0 or unset)"; };
    return differ("BYTEPS_FAILOVER_TIMEOUT_MS", on_off(theirs.failover), on_off(mine.failover));
  }
  if (theirs.async_mode != mine.async_mode) {
    auto mode = [](bool on) { return on ? "1 (asynchronous)" : "0 or unset (synchronous)"; };
    return differ("BYTEPS_ENABLE_ASYNC", mode(theirs.async_mode), mode(mine.async_mode));
  }
  if (theirs.staleness != mine.staleness) {
    auto bound = [](std::int64_t s) {
      return s < 0 ? std::string("unset (unbounded)") : std::to_string(s);
    };
    return differ("BYTEPS_ASYNC_STALENESS", bound(theirs.staleness), bound(mine.staleness));
  }
  auto bound = [](std::int32_t n) { return n == 0 ? std::string("unset") : std::to_string(n); };
  if (theirs.min_workers != mine.min_workers)
    return differ("BYTEPS_MIN_NUM_WORKER", bound(theirs.min_workers), bound(mine.min_workers));
  if (theirs.max_workers != mine.max_workers)
    return differ("BYTEPS_MAX_NUM_WORKER", bound(theirs.max_workers), bound(mine.max_workers));
  if (theirs.node_role == role::worker && theirs.key_hash != mine.key_hash)
    return differ("BYTEPS_KEY_HASH_FN", theirs.key_hash, mine.key_hash);
  if (theirs.node_role == role::worker && theirs.mixed_mode != mine.mixed_mode)
    return differ("BYTEPS_ENABLE_MIXED_MODE", int{theirs.mixed_mode}, int{mine.mixed_mode});
  return std::nullopt;
}

}  // namespace bps::rendezvous
namespace bps::rendezvous {

hello hello::from(const Config& c, role r) {
  hello h;
  h.node_role = r;
  h.requested_rank = r == role::worker ? c.worker_id : r == role::server ? c.server_id : -1;
  if (r == role::worker) {
    h.local_rank = c.local_rank;
    h.local_size = c.local_size;
  }
  h.partition_bytes = c.partition_bytes;
  h.num_workers = c.num_workers;
  h.num_servers = c.num_servers;
  h.key_hash = std::string(key_hash_name(c.key_hash));
  h.mixed_mode = c.mixed_mode ? 1 : 0;
  h.failover = c.failover();
  h.standby = r == role::server && c.server_standby;
  h.async_mode = c.enable_async;
  h.staleness = c.async_staleness;
  h.min_workers = c.min_workers;
  h.max_workers = c.max_workers;
  return h;
}

}  // namespace bps::rendezvous
