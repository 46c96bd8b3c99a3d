#pragma once
/// @file
/// The bodies of detail/trace.hpp's functions that are not templates: inline in header-only mode,
/// compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::detail {

std::string trace_recorder::write(const clock_offset& clock) {
  std::lock_guard lock(mu_);
  if (written_ || rank_ < 0) return {};
  written_ = true;
  const auto path = path_locked(), partial = path + ".partial";
  {
    std::ofstream out(partial, std::ios::trunc);
    write_json_locked(out, clock);
    if (!out.flush())
      return fmt::format("cannot write the timeline to {} (BYTEPS_TRACE_DIR)", partial);
  }
  std::error_code ec;
  std::filesystem::rename(partial, path, ec);  // a reader never sees half a file
  if (ec) return fmt::format("cannot rename {} to {}: {}", partial, path, ec.message());
  return {};
}

std::string trace_recorder::path_locked() const {
  if (rank_ < 0) return {};
  return (std::filesystem::path(dir_) / fmt::format("{}-{}.json", role_name(role_), rank_))
      .string();
}

std::string trace_recorder::quoted(std::string_view s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      q += {'\\', c};
    else if (static_cast<unsigned char>(c) < 0x20)
      q += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
    else
      q += c;
  }
  return q + "\"";
}

void trace_recorder::write_json_locked(std::ofstream& out, const clock_offset& clock) const {
  const int pid = pid_locked();
  out << "{\"traceEvents\":[\n";
  out << fmt::format(
      "{{\"ph\":\"M\",\"pid\":{},\"tid\":0,\"name\":\"process_name\","
      "\"args\":{{\"name\":{}}}}},\n",
      pid, quoted(node_name_));
  out << fmt::format(
      "{{\"ph\":\"M\",\"pid\":{},\"tid\":0,\"name\":\"process_sort_index\","
      "\"args\":{{\"sort_index\":{}}}}}",
      pid, pid);
  for (std::size_t i = 0; i < lane_names_.size(); ++i) {
    out << fmt::format(
        ",\n{{\"ph\":\"M\",\"pid\":{},\"tid\":{},\"name\":\"thread_name\","
        "\"args\":{{\"name\":{}}}}}",
        pid, i + 1, quoted(lane_names_[i]));
    out << fmt::format(
        ",\n{{\"ph\":\"M\",\"pid\":{},\"tid\":{},\"name\":\"thread_sort_index\","
        "\"args\":{{\"sort_index\":{}}}}}",
        pid, i + 1, i + 1);
  }
  for (const auto& e : events_) {
    const std::string name = e.name ? quoted(e.name) : quoted(lane_names_[e.lane - 1]);
    if (e.phase != 'X') {
      out << fmt::format(
          ",\n{{\"ph\":\"{}\",{}\"pid\":{},\"tid\":{},\"name\":{},\"cat\":"
          "\"flow\",\"id\":\"{:#x}\",\"ts\":{}}}",
          e.phase, e.phase == 'f' ? "\"bp\":\"e\"," : "", pid, e.lane, name, e.flow,
          micros(e.ts_ns));
      continue;
    }
    std::string args = fmt::format("\"round\":{}", e.round);
    if (e.part >= 0) args += fmt::format(",\"part\":{}", e.part);
    if (e.peer >= 0)
      args += fmt::format(",\"{}\":{}", role_ == role::server ? "worker" : "server", e.peer);
    if (e.bytes > 0) args += fmt::format(",\"bytes\":{}", e.bytes);
    if (e.failed) args += ",\"failed\":true";
    out << fmt::format(
        ",\n{{\"ph\":\"X\",\"pid\":{},\"tid\":{},\"name\":{},\"cat\":\"{}\","
        "\"ts\":{},\"dur\":{},\"args\":{{{}}}}}",
        pid, e.lane, name, e.name ? "stage" : "tensor", micros(e.ts_ns),
        micros(std::max<std::int64_t>(e.dur_ns, 0)), args);
  }
  out << fmt::format(
      "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{{\"byteps_role\":\"{}\","
      "\"byteps_rank\":{},\"byteps_node\":{},\"trace_start_step\":{},\"trace_end_step\":{},"
      "\"clock_offset_us\":{},\"clock_rtt_us\":{},\"clock_samples\":{}}}}}\n",
      role_name(role_), rank_, quoted(node_name_), start_, end_, micros(clock.offset_ns),
      micros(clock.rtt_ns), clock.samples);
}

trace_recorder::trace_recorder(const Config& cfg, role r)
    : role_(r), start_(cfg.trace_start_step), end_(cfg.trace_end_step), dir_(cfg.trace_dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec || !std::filesystem::is_directory(dir_))
    throw usage_error(
        fmt::format("BYTEPS_TRACE_DIR='{}' cannot be made a folder ({}); set it "
                    "to a writable folder or set BYTEPS_TRACE_ON=0",
                    dir_, ec ? ec.message() : "a file is in the way"));
}

}  // namespace bps::detail
