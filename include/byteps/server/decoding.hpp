#pragma once
/// @file
/// `server::decoding<Inner>`: a `ServerHandler` decorator that lets the servers take pushes of
/// any compressor, as BytePS's servers do: each push flagged `wire::flag_compressed` is decoded,
/// the decoded partition goes to `Inner` (by default `sync_sum`) as an ordinary push, and the
/// answer `Inner` gives is encoded again before it goes out. Unflagged pushes go to `Inner` as
/// they are, after one flag test, so `Inner` and the uncompressed path are unchanged; an
/// asynchronous handler can be wrapped the same way.
///
/// One compressor per partition key, made on the key's first compressed push from the recipe
/// its workers declared (`request::codec`: `compress::for_server` of it, made by the server's
/// registry). It decodes every worker's push (decoding keeps no state) and encodes each answer,
/// so a server-side error feedback (`ef_...`) keeps its error here, per key, as BytePS's
/// servers do. The engine that owns the key is the only thread that touches it.
///
/// A compressed push's payload is the partition's raw size (u64, little-endian), then the
/// encoding. The raw size is checked (whole elements, at most `Config::max_frame_bytes()`),
/// and an encoding that does not decode is refused with a usage error naming the tensor, the
/// partition and the worker: bytes from the network never crash the server. The answer's bytes
/// are owned by the reply (`reply::keep`), since the next round re-encodes.
///
/// Not supported (refused, naming why): a compressed `sum_offer` (failover; workers refuse
/// failover with a compressor the servers decode), and an `Inner` that answers a compressed key
/// in pieces (`sync_sum` never does: compressed pushes are never streamed).

#include <fmt/core.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "byteps/compress/compressor.hpp"
#include "byteps/core/config.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/detail/buffer_pool.hpp"
#include "byteps/server/fwd.hpp"
#include "byteps/server/handler.hpp"
#include "byteps/server/sync_sum.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::server {

template <class Inner = sync_sum>
class decoding {
  static_assert(ServerHandler<Inner>, "decoding<Inner>: Inner must model bps::ServerHandler");

 public:
  /// Uncompressed pushes stream exactly when `Inner`'s do.
  static constexpr bool cut_through = streams_pushes<Inner>;
  static constexpr bool decodes_compressed = true;
  /// Landed pushes: a compressed one is decoded from where it landed (during `handle`), an
  /// uncompressed one goes to `Inner`, so it takes them when `Inner` does.
  static constexpr bool reads_in_place = server::reads_in_place<Inner>;

  decoding(const Config& cfg, detail::buffer_pool& pool)
      : inner_(cfg, pool), pool_(&pool), max_raw_(cfg.max_frame_bytes()) {}

  /// The inner handler's refusals (server/handler.hpp, `checks_config`).
  static void check_config(const Config& cfg) requires checks_config<Inner> {
    Inner::check_config(cfg);
  }

  Inner& inner() noexcept { return inner_; }

  /// The inner handler's (server/handler.hpp, `restarts_rounds`). Compressed keys' state here
  /// is not restarted: elastic mode with compression is a later step of
  /// docs/plans/issue-39-elastic.md.
  std::vector<round_redo> restart_rounds(const std::vector<bool>& members)
    requires restarts_rounds<Inner> {
    return inner_.restart_rounds(members);
  }

  outcome handle(const request& r) {
    if ((r.head.flags & wire::flag_compressed) == 0) return inner_.handle(r);
    return compressed(r);
  }

  /// The key's server compressor, or null before its first compressed push (for tests).
  const compress::any* compressor(const key_id& id) const {
    auto it = codecs_.find(id);
    return it == codecs_.end() ? nullptr : it->second.get();
  }

 private:
  outcome compressed(const request& r) {
    const wire::header& h = r.head;
    const auto where = [&] {
      return fmt::format("{} partition {} from worker {}", r.tensor_name(), h.part, r.worker);
    };
    if (h.type != wire::msg::push)
      return outcome::refuse(fmt::format(
          "a compressed {} of {}: failover does not support compression that servers decode",
          wire::msg_name(h.type), where()));
    if (r.codec == nullptr)
      return outcome::refuse(fmt::format(
          "a compressed push of {}, but the tensor was not declared to this server with a "
          "compressor it could make",
          where()));
    const auto type = dtype_from_wire(h.dtype);
    const std::span<const std::byte> in = r.whole();
    const bool partial = !(r.push.first && r.push.complete);  // never: not streamed
    if (!type || partial || in.size() < wire::compressed_prefix_bytes)
      return outcome::refuse(fmt::format("a malformed compressed push of {}: {}", where(),
                                         !type ? fmt::format("dtype value {} is unknown", h.dtype)
                                               : std::string("shorter than its 8-byte raw size")));
    const std::uint64_t raw = wire::detail::get_le<std::uint64_t>(in.data());
    if (raw == 0 || raw % dtype_size(*type) != 0 || raw > max_raw_)
      return outcome::refuse(fmt::format(
          "a malformed compressed push of {}: a raw size of {} bytes is not whole {} elements "
          "of at most {} bytes",
          where(), raw, dtype_name(*type), max_raw_));
    auto& codec = codecs_[key_id{h.key, h.part}];
    if (!codec) codec = r.codec->make();
    if (!codec)
      return outcome::refuse(
          fmt::format("compressor '{}' of {} made nothing", r.codec->name(), where()));
    auto decoded = pool_->take(static_cast<std::size_t>(raw));
    try {
      codec->decode(in.subspan(wire::compressed_prefix_bytes), *type, decoded.span());
    } catch (const std::exception& e) {
      pool_->give_back(std::move(decoded));
      return outcome::refuse(
          fmt::format("a malformed compressed push of {}: compressor '{}' "
                      "cannot decode it: {}",
                      where(), codec->name(), e.what()));
    }
    wire::header plain = h;
    plain.flags &= ~wire::flag_compressed;
    plain.payload_bytes = raw;
    outcome o =
        inner_.handle(request{plain, push_bytes::in(decoded), r.worker, r.num_workers, r.failover,
                             r.tensor_name});
    pool_->give_back(std::move(decoded));  // or whatever Inner swapped in for it
    using kind = outcome::kind;
    if (o.what == kind::release || o.what == kind::answer_now) return encode(*codec, o, r);
    if (o.what == kind::piece)
      return outcome::fail_round(fmt::format(
          "{} partition {}: the server's handler answered a compressed tensor in pieces, which "
          "cannot be encoded",
          r.tensor_name(), h.part));
    return o;
  }

  // The answer, encoded with the key's compressor into bytes the reply owns.
  static outcome encode(compress::any& codec, outcome o, const request& r) {
    reply& a = o.answer;
    try {
      auto out =
          std::make_shared<std::vector<std::byte>>(codec.max_encoded_bytes(a.bytes.size(), a.type));
      out->resize(codec.encode(a.bytes, a.type, *out));
      a.bytes = *out;
      a.keep = std::move(out);
      a.compressed = true;
      return o;
    } catch (const std::exception& e) {
      auto why = fmt::format("{} partition {} round {}: compressor '{}' cannot encode the sum: {}",
                             r.tensor_name(), r.head.part, a.round, codec.name(), e.what());
      return o.what == outcome::kind::release ? outcome::fail_round(std::move(why))
                                              : outcome::refuse(std::move(why));
    }
  }

  Inner inner_;
  detail::buffer_pool* pool_;
  std::size_t max_raw_;
  std::unordered_map<key_id, std::unique_ptr<compress::any>, key_id_hash> codecs_;
};

static_assert(ServerHandler<decoding<>>);

}  // namespace bps::server
