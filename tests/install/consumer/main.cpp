// A program outside byteps, built against an installed byteps (find_package or Conan): it runs a
// whole job in one process, a scheduler, one server and two workers on loopback, and checks the
// sum that comes back.
#include <byteps/byteps.hpp>

#if defined(BYTEPS_CONSUMER_EXPECTS_COMPILED_MODE) && !defined(BYTEPS_COMPILED)
#error "byteps::compiled was linked, but BYTEPS_COMPILED is not defined"
#endif

#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {
std::mutex error_mu;
std::string first_error;

// Runs a node's body; an exception becomes the program's error instead of std::terminate.
template <class F>
std::thread node(F body) {
  return std::thread([body]() mutable {
    try {
      body();
    } catch (const std::exception& e) {
      std::lock_guard lock(error_mu);
      if (first_error.empty()) first_error = e.what();
    }
  });
}
}  // namespace

int main() {
  using Comm = bps::Communicator<bps::transport::tcp, bps::local::none, bps::partition::by_bytes,
                                 bps::schedule::priority>;
  try {
    bps::Config config;
    config.num_workers = 2;
    config.num_servers = 1;
    config.log = bps::log_level::warning;
    config.job_token = "consumer-token";  // every hello proves it with OpenSSL's HMAC (libcrypto)
    config.node_role = bps::role::scheduler;
    bps::SchedulerNode<bps::transport::tcp> scheduler(config);  // port 0: any free port
    config.scheduler_port = scheduler.port();

    std::vector<std::thread> nodes;
    nodes.push_back(node([&] { scheduler.run(); }));
    nodes.push_back(node([config]() mutable {
      config.node_role = bps::role::server;
      bps::Server<bps::transport::tcp>(config).run();
    }));
    std::vector<float> results(2);
    for (int w = 0; w < 2; ++w) {
      nodes.push_back(node([config, w, &results]() mutable {
        config.node_role = bps::role::worker;
        config.worker_id = w;
        Comm comm(config);
        std::vector<float> grad(1000, static_cast<float>(w + 1));
        comm.push_pull("grad", std::span(grad)).wait();
        results[static_cast<std::size_t>(w)] = grad[999];
      }));
    }
    for (auto& t : nodes) t.join();
    if (!first_error.empty()) {
      std::fprintf(stderr, "consumer: %s\n", first_error.c_str());
      return 1;
    }
    if (results[0] != 3.0f || results[1] != 3.0f) {
      std::fprintf(stderr, "consumer: expected 1 + 2 = 3 on both workers, got %g and %g\n",
                   results[0], results[1]);
      return 1;
    }
#if defined(BYTEPS_COMPILED)
    const char* mode = "compiled mode (byteps::compiled)";
#else
    const char* mode = "header-only (byteps::byteps)";
#endif
    std::printf("consumer: byteps %s works, %s: 2 workers summed through 1 server\n",
                bps::version, mode);
    return 0;
  } catch (const bps::error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
