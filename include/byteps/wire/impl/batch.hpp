#pragma once
/// @file
/// The bodies of wire/batch.hpp's functions that are not templates: inline in header-only mode,
/// compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::wire {

std::vector<batch_record> split_batch(const header& batch, std::span<const std::byte> payload) {
  const msg want = record_type(batch.type);
  const auto name = msg_name(batch.type);
  if (want == batch.type) throw decode_error(fmt::format("a {} frame is not a batch", name));
  if (payload.size() > max_batch_bytes)
    throw decode_error(
        fmt::format("a {} of {} bytes (at most {})", name, payload.size(), max_batch_bytes));
  const std::size_t count = batch.part;
  if (count == 0) throw decode_error(fmt::format("a {} of no records", name));
  std::vector<batch_record> records;
  records.reserve(std::min(count, payload.size() / header_size));  // the count is the peer's
  std::size_t at = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t left = payload.size() - at;
    if (left < header_size)
      throw decode_error(
          fmt::format("{} record {} of {}: short record, the batch ends {} bytes "
                      "into its {}-byte header",
                      name, i, count, left, header_size));
    // A record may declare no more than what is left of the batch; bounding decode() by it
    // names that case apart below, so the limit here is only the largest possible.
    auto d = decode(std::span<const std::byte, header_size>(payload.data() + at, header_size),
                    max_batch_bytes);
    if (!d && d.status != decode_status::too_large)
      throw decode_error(
          fmt::format("{} record {} of {}: invalid record header: {}", name, i, count, d.reason));
    if (d.value.type != want)
      throw decode_error(fmt::format("{} record {} of {}: a {} record (a {} carries {} records)",
                                     name, i, count, msg_name(d.value.type), name, msg_name(want)));
    at += header_size;
    if (d.value.payload_bytes > left - header_size)
      throw decode_error(
          fmt::format("{} record {} of {}: record larger than the batch, it declares "
                      "{} payload bytes but {} bytes of the batch are left",
                      name, i, count, d.value.payload_bytes, left - header_size));
    const auto n = static_cast<std::size_t>(d.value.payload_bytes);
    records.push_back(batch_record{d.value, payload.subspan(at, n)});
    at += n;
  }
  if (at != payload.size())
    throw decode_error(fmt::format("{} of {} records: {} trailing bytes after the last record",
                                   name, count, payload.size() - at));
  return records;
}

}  // namespace bps::wire
