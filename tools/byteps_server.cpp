// byteps-server: the scheduler or a summation server of a byteps job, from the same headers as
// the workers. An application with its own transport writes the same few lines with its type.
// The transport is chosen at run time: TCP (with shared memory to colocated workers), TLS over
// TCP when BYTEPS_TLS_CERT is set, or RDMA (`--transport rdma` / DMLC_ENABLE_RDMA=ibverbs) where
// the build has rdma-core (and libssl for TLS).
#include <byteps/bodies.hpp>
#if BYTEPS_SERVER_WITH_RDMA
#include <byteps/transport/rdma/rdma.hpp>
#endif
#if BYTEPS_SERVER_TLS
#include <byteps/transport/tls/tls.hpp>
#endif

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

namespace {

struct flag {
  const char* name;
  const char* variable;
  const char* help;
};

constexpr flag flags[] = {
    {"--role", "DMLC_ROLE", "scheduler or server"},
    {"--num-workers", "DMLC_NUM_WORKER", "number of workers"},
    {"--num-servers", "DMLC_NUM_SERVER", "number of servers"},
    {"--root-uri", "DMLC_PS_ROOT_URI", "the scheduler's address"},
    {"--root-port", "DMLC_PS_ROOT_PORT", "the scheduler's port (scheduler: 0 picks a free one)"},
    {"--host", "DMLC_NODE_HOST", "server: address to listen on and advertise"},
    {"--port", "BYTEPS_SERVER_PORT", "server: port to listen on (0: any)"},
    {"--server-id", "BYTEPS_SERVER_ID",
     "server: ask for this rank (a restarted server: its old one)"},
    {"--standby", "BYTEPS_SERVER_STANDBY", "server: 1 = wait to replace a server that dies"},
    {"--failover-timeout-ms", "BYTEPS_FAILOVER_TIMEOUT_MS",
     "0 (off) or how long a dead server's rank waits for a replacement"},
    {"--engine-threads", "BYTEPS_SERVER_ENGINE_THREAD", "server: summation threads (default 4)"},
    {"--chunk-bytes", "BYTEPS_SERVER_CHUNK_BYTES",
     "server: cut-through chunk (default 262144; 0: answer whole partitions)"},
    {"--fusion-bytes", "BYTEPS_FUSION_BYTES",
     "server: answers up to this size for one worker's batch go back in one frame "
     "(default 65536; 0: each alone)"},
    {"--log-interval-ms", "BYTEPS_SERVER_LOG_INTERVAL_MS",
     "server: log throughput and lagging workers this often (default 10000; 0: off)"},
    {"--partition-bytes", "BYTEPS_PARTITION_BYTES", "must match the workers' (default 0: auto)"},
    {"--async", "BYTEPS_ENABLE_ASYNC",
     "1 = asynchronous training: servers hold the parameters (default 0; on every node)"},
    {"--staleness", "BYTEPS_ASYNC_STALENESS",
     "async: most pushes a worker may lead the slowest (default unset: unbounded)"},
    {"--log-level", "BYTEPS_LOG_LEVEL", "TRACE, DEBUG, INFO, WARNING, ERROR or OFF"},
    {"--interface", "DMLC_INTERFACE", "server: listen on this network interface's address"},
    {"--tls-cert", "BYTEPS_TLS_CERT",
     "set: every connection in TLS with this certificate (PEM; needs the next two)"},
    {"--tls-key", "BYTEPS_TLS_KEY", "TLS: the certificate's private key (PEM)"},
    {"--tls-ca", "BYTEPS_TLS_CA", "TLS: the CA every peer's certificate must be signed by"},
};

#if BYTEPS_SERVER_WITH_RDMA
constexpr bool built_with_rdma = true;
#else
constexpr bool built_with_rdma = false;
#endif

void usage(std::FILE* out) {
  std::fprintf(out,
               "byteps-server %s: the scheduler or a summation server of a byteps job.\n\n"
               "Usage: byteps-server [--flag value ...] [--port-file FILE]\n\n"
               "Every flag overrides the environment variable beside it; see docs/env.md for "
               "all of them.\nTransport: TCP, or TLS (mutual certificates, docs/reliability.md) "
               "when BYTEPS_TLS_CERT is set; the workers must use the same.\n",
               bps::version);
  for (const auto& f : flags) std::fprintf(out, "  %-22s %-30s %s\n", f.name, f.variable, f.help);
  std::fprintf(out,
               "  %-22s %-30s %s\n"
               "  %-22s %-30s %s\n"
               "\nExample (a job of 2 workers and 1 server on this machine):\n"
               "  byteps-server --role scheduler --num-workers 2 --num-servers 1 "
               "--root-uri 127.0.0.1 --root-port 9000 &\n"
               "  byteps-server --role server    --num-workers 2 --num-servers 1 "
               "--root-uri 127.0.0.1 --root-port 9000 &\n",
               "--port-file", "", "scheduler: write the bound port to FILE once listening",
               "--transport", "DMLC_ENABLE_RDMA",
               built_with_rdma ? "tcp (default) or rdma (verbs; the same on every node)"
                               : "tcp (this build has no rdma: built without rdma-core)");
}

// The scheduler over `Scheduler`, or a summation server over `ServerNet` (sync or async).
template <class Scheduler, class ServerNet>
void run_node(const bps::Config& cfg, const std::string& port_file) {
  if (cfg.node_role == bps::role::scheduler) {
    bps::SchedulerNode<Scheduler> scheduler(cfg);
    if (!port_file.empty()) {
      // Written whole, then renamed: a launcher polling the file never reads half a number.
      const std::string partial = port_file + ".partial";
      std::ofstream(partial) << scheduler.port() << "\n";
      std::rename(partial.c_str(), port_file.c_str());
    }
    scheduler.run();
  } else if (cfg.enable_async) {  // BYTEPS_ENABLE_ASYNC=1: servers hold the parameters
    bps::Server<ServerNet, bps::server::async_sum> server(cfg);
    server.run();
  } else {
    bps::Server<ServerNet> server(cfg);
    server.run();
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string port_file;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      usage(stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "byteps-server: %s needs a value (see --help)\n", argv[i]);
      return 2;
    }
    const char* value = argv[++i];
    if (arg == "--port-file") {
      port_file = value;
      continue;
    }
    if (arg == "--transport") {  // DMLC_ENABLE_RDMA as ps-lite spells it
      const std::string_view t = value;
      if (t != "tcp" && t != "rdma") {
        std::fprintf(stderr, "byteps-server: --transport '%s' is not valid: expected tcp or rdma\n",
                     value);
        return 2;
      }
      ::setenv("DMLC_ENABLE_RDMA", t == "rdma" ? "ibverbs" : "0", 1);
      continue;
    }
    bool known = false;
    for (const auto& f : flags) {
      if (arg == f.name) {
        ::setenv(f.variable, value, 1);
        known = true;
      }
    }
    if (!known) {
      std::fprintf(stderr, "byteps-server: unknown flag %s (see --help)\n", argv[i - 1]);
      return 2;
    }
  }
  try {
    const bps::Config cfg = bps::Config::from_env();
    if (cfg.node_role == bps::role::worker) {
      std::fprintf(stderr,
                   "byteps-server: DMLC_ROLE=worker: workers are your training program; run "
                   "this binary as scheduler or server\n");
      return 2;
    }
    if (cfg.enable_rdma) {
      if (!cfg.tls_cert.empty())
        throw bps::usage_error(
            "BYTEPS_TLS_CERT is set with DMLC_ENABLE_RDMA: TLS wraps TCP only; unset one");
#if BYTEPS_SERVER_WITH_RDMA
      run_node<bps::transport::rdma, bps::transport::rdma>(cfg, port_file);
#else
      std::fprintf(stderr,
                   "byteps-server: DMLC_ENABLE_RDMA (or --transport rdma) asks for the RDMA "
                   "transport, but this "
                   "byteps-server was built without it (BYTEPS_WITH_RDMA=OFF, or rdma-core's "
                   "libibverbs-dev and librdmacm-dev were not found): rebuild with rdma-core, or "
                   "use --transport tcp\n");
      return 2;
#endif
    } else if (!cfg.tls_cert.empty()) {
#if BYTEPS_SERVER_TLS
      using tls = bps::transport::tls<bps::transport::tcp>;
      run_node<tls, bps::transport::ipc<tls>>(cfg, port_file);
#else
      throw bps::usage_error(
          "BYTEPS_TLS_CERT is set, but this byteps-server was built without TLS (libssl not "
          "found or BYTEPS_WITH_TLS=OFF)");
#endif
    } else {
      // Colocated workers that speak ipc send their pushes through shared memory
      // (BYTEPS_ENABLE_IPC=0 turns it off); every other worker talks plain TCP.
      run_node<bps::transport::tcp, bps::transport::ipc<bps::transport::tcp>>(cfg, port_file);
    }
  } catch (const bps::usage_error& e) {
    std::fprintf(stderr, "byteps-server: %s\n", e.what());
    return 2;
  } catch (const bps::error& e) {
    std::fprintf(stderr, "byteps-server: %s\n", e.what());
    return 1;
  }
  return 0;
}
