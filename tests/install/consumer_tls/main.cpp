// A program outside byteps built against an installed byteps with the tls component: the TLS
// transport compiles and links (libssl), and checks its files when built: a CA that is not there
// is a usage_error naming BYTEPS_TLS_CA and the path.
#include <byteps/transport/tls/tls.hpp>
#include <cstdio>
#include <string>

using tls_tcp = bps::transport::tls<bps::transport::tcp>;
static_assert(bps::Transport<tls_tcp>);

int main() {
  bps::Config cfg;
  cfg.tls_ca = "/nonexistent/byteps-ca.pem";
  cfg.tls_cert = "/nonexistent/node.pem";
  cfg.tls_key = "/nonexistent/node.key";
  try {
    tls_tcp net(cfg);
  } catch (const bps::usage_error& e) {
    const std::string expected =
        "BYTEPS_TLS_CA='/nonexistent/byteps-ca.pem' cannot be read: No such file or directory";
    if (expected != e.what()) {
      std::printf("consumer_tls: unexpected message: %s\n", e.what());
      return 1;
    }
    std::printf("consumer_tls: libssl linked; %s\n", e.what());
    return 0;
  }
  std::printf("consumer_tls: a missing CA file was accepted\n");
  return 1;
}
