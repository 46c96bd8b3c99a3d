// bps-ps-traffic: the bytes of one push_pull round of the PS topology, moved by plain TCP.
//
// What the emulated network itself allows a PS round, without byteps: N worker hosts and K
// server hosts (N + K hosts of benchmarks/emulate.sh, workers first); each worker sends B bytes
// to each server (its pushes) and each server sends B bytes to each worker (its answers), all on
// one connection per pair, as byteps does. B = M / K, so every link carries M each way, the load
// of a byteps round of M bytes per worker. Run on every host (`emulate.sh --each`); host 0
// prints each timed round's time over M/B. `--help` says more.
//
// A compiled program, one blocking thread per connection and direction: the bytes cost the
// kernel what they cost byteps, and the program itself next to nothing (docs/performance.md,
// "the bytes alone, compiled", says why that matters on a 2-core machine).

#include <arpa/inet.h>
#include <fmt/core.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "bench_options.hpp"

namespace {

constexpr int kPort = 9700;  // server s listens on kPort + s, so that every host may be 127.0.0.1

constexpr std::string_view kHelp = R"(usage: bps-ps-traffic --workers N [options]

The bytes of one push_pull round of the PS topology, moved by plain TCP: N worker hosts and K
server hosts (the N + K hosts of benchmarks/emulate.sh, workers first). Each worker sends M/K
bytes to each server and each server as much back, one connection per pair, both directions at
once, so every link carries M each way, as in a byteps round of M bytes per worker.

  --workers N       hosts 0..N-1 are workers, the rest servers (required)
  --bytes M         bytes a worker pushes a round (default 64M; K/M/G are binary)
  --answers free    (default) a server sends its answers from the start, as fast as TCP takes
                    them: the network's and TCP's own time for the round's bytes
  --answers gated   a server sends chunk c of its answers only once chunk c of every worker's
                    pushes is in: a PS round's data dependency, with no sum, scheduling or framing
  --stagger         every host sends to one peer at a time, all its bytes for that peer, the
                    peers in turn from its own index on (worker w to server w + t at step t,
                    server s to worker s + t), so that each link carries one flow at a time
                    when the hosts keep step; with free answers only
  --chunk C         the unit a gated server answers in (default 128K, byteps's chunk of a 1 MiB
                    partition)
  --rounds R        rounds in all (default 12)
  --warmup W        untimed first rounds (default 2)
  --pace BYTES      cap every connection's sending rate (SO_MAX_PACING_RATE, bytes a second);
                    0, the default, caps nothing
  --deadline S      seconds any wait may take before the host gives up (default 120)

Run on every host of an emulated cluster, as root:

  benchmarks/emulate.sh --hosts 8 --rate 1gbit \
    --each 'build-bench/benchmarks/bps-ps-traffic --workers 4 --bytes 64M --rounds 12 --warmup 2'

Host 0 prints each timed round's time (from a common start to the last byte any worker
received) over the bound M/B, and their median. Rounds start together: every host writes a file
in $EMU_DIR when ready, and all start 20 ms after the last one did. Each receiver checks every
byte against what its peer sent. Reads EMU_HOST, EMU_ADDRS, EMU_DIR, EMU_RATE and EMU_RATE_GBPS
(emulate.sh sets them; tests/bench/ps_traffic_check.sh sets them by hand on 127.0.0.1).
)";

struct failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct options {
  int workers = 0;
  std::size_t bytes = 64u << 20;
  std::size_t chunk = 128u << 10;
  bool gated = false;
  bool stagger = false;
  int rounds = 12;
  int warmup = 2;
  std::size_t pace = 0;
  double deadline_s = 120;
};

// bench::parse_bytes (4096, 4K, 256M, ...), its error naming the flag.
std::size_t parse_bytes(std::string_view flag, const std::string& text) {
  try {
    return bench::parse_bytes(text);
  } catch (const bench::usage_error& e) {
    throw failure(fmt::format("{}: {}", flag, e.what()));
  }
}

int parse_int(std::string_view flag, const std::string& text, int least) {
  try {
    std::size_t used = 0;
    const int n = std::stoi(text, &used);
    if (used == text.size() && n >= least) return n;
  } catch (const std::exception&) {
  }
  throw failure(fmt::format("{} {}: expected a whole number of at least {}", flag, text, least));
}

options parse_args(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--stagger") {
      o.stagger = true;
      continue;
    }
    if (flag == "--help" || flag == "-h") {
      std::fwrite(kHelp.data(), 1, kHelp.size(), stdout);
      std::exit(0);
    }
    if (i + 1 >= argc)
      throw failure(fmt::format("{} needs a value (--help lists the options)", flag));
    const std::string value = argv[++i];
    if (flag == "--workers")
      o.workers = parse_int(flag, value, 1);
    else if (flag == "--bytes")
      o.bytes = parse_bytes(flag, value);
    else if (flag == "--chunk")
      o.chunk = parse_bytes(flag, value);
    else if (flag == "--rounds")
      o.rounds = parse_int(flag, value, 1);
    else if (flag == "--warmup")
      o.warmup = parse_int(flag, value, 0);
    else if (flag == "--pace")
      o.pace = parse_bytes(flag, value);
    else if (flag == "--deadline")
      o.deadline_s = parse_int(flag, value, 1);
    else if (flag == "--answers") {
      if (value != "free" && value != "gated")
        throw failure(fmt::format("--answers {}: expected free or gated", value));
      o.gated = value == "gated";
    } else {
      throw failure(fmt::format("unknown option {} (--help lists the options)", flag));
    }
  }
  if (o.workers == 0) throw failure("--workers N is required (--help says more)");
  if (o.stagger && o.gated) throw failure("--stagger goes with free answers only");
  if (o.chunk == 0) throw failure("--chunk 0: a gated server needs a chunk of at least 1 byte");
  if (o.warmup >= o.rounds)
    throw failure(
        fmt::format("--warmup {} leaves none of the {} rounds timed", o.warmup, o.rounds));
  return o;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0')
    throw failure(fmt::format("${} is not set: run it through benchmarks/emulate.sh --each", name));
  return v;
}

using wall = std::chrono::system_clock;  // the hosts share one clock: the round's common start
using steady = std::chrono::steady_clock;

double now_s() {
  return std::chrono::duration<double>(wall::now().time_since_epoch()).count();
}

// The bytes `host` sends to every peer, checked by each receiver after every round.
std::vector<std::byte> pattern(int host, std::size_t size) {
  std::vector<std::byte> out(size);
  for (std::size_t i = 0; i < size; ++i) out[i] = std::byte((i + host % 251) % 251);
  return out;
}

class socket_fd {
 public:
  explicit socket_fd(int fd = -1) : fd_(fd) {}
  socket_fd(socket_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  socket_fd& operator=(socket_fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~socket_fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

sockaddr_in address_of(const std::string& host, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1)
    throw failure(fmt::format("{}: not an IPv4 address (in $EMU_ADDRS)", host));
  return a;
}

void set_option(int fd, int level, int name, const void* value, socklen_t size, const char* what) {
  if (::setsockopt(fd, level, name, value, size) != 0)
    throw failure(fmt::format("setsockopt {}: {}", what, std::strerror(errno)));
}

// Every blocking send and receive gives up at the deadline (SO_SNDTIMEO, SO_RCVTIMEO).
void tune(int fd, const options& o) {
  const int one = 1;
  set_option(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one, "TCP_NODELAY");
  timeval limit{static_cast<time_t>(o.deadline_s), 0};
  set_option(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit, "SO_RCVTIMEO");
  set_option(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit, "SO_SNDTIMEO");
  if (o.pace != 0) {
    const auto rate = static_cast<unsigned>(std::min<std::size_t>(o.pace, 0xffffffffu));
    set_option(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof rate, "SO_MAX_PACING_RATE");
  }
}

void send_all(int fd, const std::byte* data, std::size_t size, const char* to) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw failure(fmt::format("sending to {}: {}", to,
                                errno == EAGAIN ? "gave up at --deadline" : std::strerror(errno)));
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

// Fills [data, data + size) from fd; calls progress(bytes so far) after each receive.
template <class Progress>
void receive_all(int fd, std::byte* data, std::size_t size, const char* from, Progress progress) {
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::recv(fd, data + got, size - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) throw failure(fmt::format("{} closed its connection mid-round", from));
    if (n < 0)
      throw failure(fmt::format("receiving from {}: {}", from,
                                errno == EAGAIN ? "gave up at --deadline" : std::strerror(errno)));
    got += static_cast<std::size_t>(n);
    progress(got);
  }
}

struct peer {
  peer(int h, socket_fd f) : host(h), fd(std::move(f)), name(fmt::format("host {}", h)) {}
  int host;
  socket_fd fd;
  std::string name;  // for messages
  std::vector<std::byte> expected, incoming;
};

// One connection per worker-server pair: workers connect, servers accept.
std::vector<peer> connect_pairs(const options& o, int host, const std::vector<std::string>& addrs,
                                steady::time_point deadline) {
  const int hosts = static_cast<int>(addrs.size()), servers = hosts - o.workers;
  std::vector<peer> peers;
  if (host < o.workers) {
    for (int s = 0; s < servers; ++s) {
      const auto where = address_of(addrs[static_cast<std::size_t>(o.workers + s)], kPort + s);
      for (;;) {
        socket_fd fd(::socket(AF_INET, SOCK_STREAM, 0));
        if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&where), sizeof where) == 0) {
          const std::uint32_t id = htonl(static_cast<std::uint32_t>(host));
          send_all(fd.get(), reinterpret_cast<const std::byte*>(&id), sizeof id, "a server");
          peers.push_back(peer{o.workers + s, std::move(fd)});
          break;
        }
        if (steady::now() > deadline)
          throw failure(fmt::format("gave up waiting for server {} to listen", s));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  } else {
    socket_fd listener(::socket(AF_INET, SOCK_STREAM, 0));
    const int one = 1;
    set_option(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one, "SO_REUSEADDR");
    auto where = address_of("0.0.0.0", kPort + host - o.workers);
    if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&where), sizeof where) != 0 ||
        ::listen(listener.get(), o.workers) != 0)
      throw failure(
          fmt::format("listening on port {}: {}", kPort + host - o.workers, std::strerror(errno)));
    timeval second{1, 0};  // accept wakes each second to check the deadline
    set_option(listener.get(), SOL_SOCKET, SO_RCVTIMEO, &second, sizeof second, "SO_RCVTIMEO");
    while (static_cast<int>(peers.size()) < o.workers) {
      socket_fd fd(::accept(listener.get(), nullptr, nullptr));
      if (fd.get() < 0) {
        if (steady::now() > deadline) throw failure("gave up waiting for the workers to connect");
        continue;
      }
      std::uint32_t id = 0;
      receive_all(fd.get(), reinterpret_cast<std::byte*>(&id), sizeof id, "a worker",
                  [](std::size_t) {});
      peers.push_back(peer{static_cast<int>(ntohl(id)), std::move(fd)});
    }
  }
  std::sort(peers.begin(), peers.end(),
            [](const peer& a, const peer& b) { return a.host < b.host; });
  for (auto& p : peers) tune(p.fd.get(), o);
  return peers;
}

// Every host writes its clock in `dir`; all wake 20 ms after the last one wrote.
double barrier(const std::filesystem::path& dir, const std::string& name, int host, int hosts,
               steady::time_point deadline) {
  const auto mine = dir / fmt::format("{}.{}", name, host);
  { std::ofstream(mine.string() + ".tmp") << fmt::format("{:.6f}", now_s()); }
  std::filesystem::rename(mine.string() + ".tmp", mine);
  double last = 0;
  for (int h = 0; h < hosts;) {
    std::ifstream in(dir / fmt::format("{}.{}", name, h));
    double stamp = 0;
    if (in >> stamp) {
      last = std::max(last, stamp);
      ++h;
      continue;
    }
    if (steady::now() > deadline)
      throw failure(fmt::format("gave up waiting for the other hosts at '{}'", name));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const double start = last + 0.020;
  std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, start - now_s())));
  return start;
}

// One round: a receiving thread per peer, and a sending thread per peer or, with `stagger_from`
// >= 0, one that sends to the peers in turn from that index on. With `gated` (a server's
// answers), chunk c goes once chunk c from every peer is in.
void run_round(std::vector<peer>& peers, const std::vector<std::byte>& outgoing, bool gated,
               std::size_t chunk, int stagger_from) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::size_t> received(peers.size(), 0);
  std::string error;
  auto fail = [&](const std::exception& e) {
    std::lock_guard lock(mu);
    if (error.empty()) error = e.what();
    cv.notify_all();
  };
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < peers.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        auto& p = peers[i];
        std::size_t mark = chunk;
        receive_all(p.fd.get(), p.incoming.data(), p.incoming.size(), p.name.c_str(),
                    [&](std::size_t got) {
                      if (!gated || (got < mark && got < p.incoming.size())) return;
                      mark = (got / chunk + 1) * chunk;
                      std::lock_guard lock(mu);
                      received[i] = got;
                      cv.notify_all();
                    });
      } catch (const std::exception& e) {
        fail(e);
      }
    });
    if (stagger_from >= 0) continue;
    threads.emplace_back([&, i] {
      try {
        auto& p = peers[i];
        if (!gated) return send_all(p.fd.get(), outgoing.data(), outgoing.size(), p.name.c_str());
        for (std::size_t begin = 0; begin < outgoing.size(); begin += chunk) {
          const std::size_t end = std::min(begin + chunk, outgoing.size());
          {
            std::unique_lock lock(mu);
            // The receivers give up at --deadline, and say so here.
            cv.wait(lock, [&] {
              return !error.empty() || *std::min_element(received.begin(), received.end()) >= end;
            });
            if (!error.empty()) return;
          }
          send_all(p.fd.get(), outgoing.data() + begin, end - begin, p.name.c_str());
        }
      } catch (const std::exception& e) {
        fail(e);
      }
    });
  }
  if (stagger_from >= 0) {
    threads.emplace_back([&] {
      try {
        for (std::size_t t = 0; t < peers.size(); ++t) {
          auto& p = peers[(static_cast<std::size_t>(stagger_from) + t) % peers.size()];
          send_all(p.fd.get(), outgoing.data(), outgoing.size(), p.name.c_str());
        }
      } catch (const std::exception& e) {
        fail(e);
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!error.empty()) throw failure(error);
}

std::vector<double> read_times(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<double> out;
  for (double t; in >> t;) out.push_back(t);
  return out;
}

int run(const options& o) {
  const int host = parse_int("$EMU_HOST", env("EMU_HOST"), 0);
  std::vector<std::string> addrs;
  {
    std::istringstream in(env("EMU_ADDRS"));
    for (std::string a; in >> a;) addrs.push_back(a);
  }
  const std::filesystem::path dir = env("EMU_DIR");
  const int hosts = static_cast<int>(addrs.size()), servers = hosts - o.workers;
  if (servers <= 0)
    throw failure(fmt::format("--workers {} leaves no server among the {} hosts of $EMU_ADDRS",
                              o.workers, hosts));
  if (host >= hosts)
    throw failure(
        fmt::format("$EMU_HOST {} is not one of the {} hosts of $EMU_ADDRS", host, hosts));
  if (o.bytes % static_cast<std::size_t>(servers) != 0)
    throw failure(fmt::format("--bytes {} is not a multiple of the {} servers", o.bytes, servers));
  const std::size_t per_pair = o.bytes / static_cast<std::size_t>(servers);
  const auto deadline = steady::now() + std::chrono::duration_cast<steady::duration>(
                                            std::chrono::duration<double>(o.deadline_s));

  auto peers = connect_pairs(o, host, addrs, deadline);
  const auto outgoing = pattern(host, per_pair);
  for (auto& p : peers) {
    p.expected = pattern(p.host, per_pair);
    p.incoming.assign(per_pair, std::byte{0});
  }
  std::vector<double> ends;
  for (int r = 0; r < o.rounds; ++r) {
    const double start = barrier(dir, fmt::format("round{}", r), host, hosts, deadline);
    try {
      const int index = host < o.workers ? host : host - o.workers;  // among its role's hosts
      run_round(peers, outgoing, o.gated && host >= o.workers,       // workers push freely
                o.chunk, o.stagger ? index : -1);
    } catch (const failure& e) {
      throw failure(fmt::format("host {}, round {}: {}", host, r, e.what()));
    }
    ends.push_back(now_s() - start);
    for (auto& p : peers) {
      if (p.incoming != p.expected)
        throw failure(fmt::format("host {}, round {}: the bytes from host {} are not what it sent",
                                  host, r, p.host));
      std::fill(p.incoming.begin(), p.incoming.end(), std::byte{0});
    }
  }
  {
    std::ofstream out(dir / fmt::format("ends.{}.tmp", host));
    for (double e : ends) out << fmt::format("{:.9f} ", e);
  }
  std::filesystem::rename(dir / fmt::format("ends.{}.tmp", host),
                          dir / fmt::format("ends.{}", host));
  if (host != 0) return 0;

  std::vector<double> timed(static_cast<std::size_t>(o.rounds - o.warmup), 0.0);
  for (int w = 0; w < o.workers; ++w) {  // a round ends when its last worker has every answer
    const auto path = dir / fmt::format("ends.{}", w);
    while (!std::filesystem::exists(path)) {
      if (steady::now() > deadline)
        throw failure(fmt::format("gave up waiting for worker {}'s times", w));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const auto times = read_times(path);
    if (static_cast<int>(times.size()) != o.rounds)
      throw failure(fmt::format("worker {} wrote {} times, not {}", w, times.size(), o.rounds));
    for (int r = o.warmup; r < o.rounds; ++r)
      timed[static_cast<std::size_t>(r - o.warmup)] = std::max(
          timed[static_cast<std::size_t>(r - o.warmup)], times[static_cast<std::size_t>(r)]);
  }
  const double rate = std::stod(env("EMU_RATE_GBPS")) * 1e9 / 8;
  const double bound = static_cast<double>(o.bytes) / rate;
  fmt::print(
      "ps-traffic: {} workers, {} servers, {} bytes a worker, answers {}{}{}{}, link {}: "
      "bound M/B {:.1f} ms\n",
      o.workers, servers, o.bytes, o.gated ? "gated" : "free",
      o.gated ? fmt::format(" in chunks of {}", o.chunk) : std::string(),
      o.pace ? fmt::format(", each connection paced at {} B/s", o.pace) : std::string(),
      o.stagger ? ", staggered (one peer at a time)" : "", env("EMU_RATE"), bound * 1e3);
  std::string rounds;
  for (double t : timed) rounds += fmt::format("{}{:.1f}", rounds.empty() ? "" : ", ", t * 1e3);
  fmt::print("ps-traffic: rounds (ms): {}\n", rounds);
  auto sorted = timed;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  fmt::print("ps-traffic: median {:.1f} ms = {:.3f} of M/B (best {:.3f})\n", median * 1e3,
             median / bound, sorted.front() / bound);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bps-ps-traffic: %s\n", e.what());
    return 1;
  }
}
