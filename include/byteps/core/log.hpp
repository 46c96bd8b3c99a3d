#pragma once
/// @file
/// A small leveled logger. Each node owns one (no global logger), built from `Config::log_level`.
/// A line is formatted first and written with one call, so lines of concurrent threads do not mix.
/// Lines go to stderr, or to a sink the owner sets (a test that checks what a node logged).

#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace bps {

enum class log_level { trace = 0, debug = 1, info = 2, warning = 3, error = 4, off = 5 };

constexpr std::string_view log_level_name(log_level l) noexcept {
  switch (l) {
    case log_level::trace: return "TRACE";
    case log_level::debug: return "DEBUG";
    case log_level::info: return "INFO";
    case log_level::warning: return "WARNING";
    case log_level::error: return "ERROR";
    case log_level::off: return "OFF";
  }
  return "?";
}

/// @par Thread Safety
/// Safe to use from several threads at once.
class logger {
 public:
  logger() = default;
  logger(log_level level, std::string who) : level_(level), who_(std::move(who)) {}
  logger(const logger& other) : level_(other.level_) {
    std::lock_guard lock(other.mu_);
    who_ = other.who_;
    sink_ = other.sink_;
  }
  logger& operator=(const logger& other) {
    if (this != &other) {
      std::scoped_lock lock(mu_, other.mu_);
      level_ = other.level_;
      who_ = other.who_;
      sink_ = other.sink_;
    }
    return *this;
  }

  /// Receives each line (ending in a newline) instead of stderr. Must be thread-safe.
  using sink = std::function<void(log_level, std::string_view line)>;
  /// Sends the lines to `s` from now on; an empty `s` sends them to stderr again. Thread-safe,
  /// like renaming, so a test can set it while the node's threads log.
  void set_sink(sink s) {
    auto p = s ? std::make_shared<const sink>(std::move(s)) : nullptr;
    std::lock_guard lock(mu_);
    sink_ = std::move(p);
  }

  bool enabled(log_level l) const noexcept { return l >= level_ && level_ != log_level::off; }
  std::string who() const {
    std::lock_guard lock(mu_);
    return who_;
  }
  /// A node learns its rank after its I/O threads already log: renaming is thread-safe too.
  void rename(std::string who) {
    std::lock_guard lock(mu_);
    who_ = std::move(who);
  }

  template <class... Args>
  void log(log_level l, fmt::format_string<Args...> format, Args&&... args) const {
    if (!enabled(l)) return;
    auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
    std::shared_ptr<const sink> out;
    std::string line;
    {
      std::lock_guard lock(mu_);
      out = sink_;
      line = fmt::format("[{}.{:03d}] {} {}: ", now / 1000, static_cast<int>(now % 1000),
                         log_level_name(l), who_);
    }
    // Appended as a string: fmt 9's core.h format_to into a std::string needs format.h's
    // body of detail::vformat_to, which clang mangles unlike the shared libfmt's copy.
    line += fmt::format(format, std::forward<Args>(args)...);
    line.push_back('\n');
    if (out) (*out)(l, line);
    else std::fwrite(line.data(), 1, line.size(), stderr);
  }

  template <class... Args>
  void trace(fmt::format_string<Args...> f, Args&&... a) const {
    log(log_level::trace, f, std::forward<Args>(a)...);
  }
  template <class... Args>
  void debug(fmt::format_string<Args...> f, Args&&... a) const {
    log(log_level::debug, f, std::forward<Args>(a)...);
  }
  template <class... Args>
  void info(fmt::format_string<Args...> f, Args&&... a) const {
    log(log_level::info, f, std::forward<Args>(a)...);
  }
  template <class... Args>
  void warn(fmt::format_string<Args...> f, Args&&... a) const {
    log(log_level::warning, f, std::forward<Args>(a)...);
  }
  template <class... Args>
  void error(fmt::format_string<Args...> f, Args&&... a) const {
    log(log_level::error, f, std::forward<Args>(a)...);
  }

 private:
  log_level level_ = log_level::info;
  mutable std::mutex mu_;
  std::string who_ = "byteps";
  std::shared_ptr<const sink> sink_;  // null: stderr
};

}  // namespace bps
