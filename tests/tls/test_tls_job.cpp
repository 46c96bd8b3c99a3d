// A whole job over transport::tls<tcp>: 2 workers and 2 servers (and the scheduler) proving
// themselves to each other by certificates of the job's CA, exact sums of every dtype; while it
// runs, a stranger's certificate and a client without one knock on the scheduler and are
// refused with WARNINGs, and the job's answers stay exact.
#include <byteps/transport/tls/tls.hpp>
#include <catch2/catch.hpp>

#include "certificates.hpp"
#include "cluster.hpp"
#include "exact_rounds.hpp"
#include "run_cluster.hpp"
#include "tls_peers.hpp"

using namespace bps;
using tls_tcp = transport::tls<transport::tcp>;
using tls_comm = Communicator<tls_tcp, local::none, partition::by_bytes, schedule::priority>;

TEST_CASE("job: 2 workers x 2 servers give exact sums of every dtype while strangers are refused",
          "[tls]") {
  test::certificates pki;
  auto cfg = pki.member(test::base_config(2, 2));
  cfg.partition_bytes = 8192;  // several partitions per tensor, on both servers
  test::stderr_capture logged(pki);
  const std::size_t sizes[] = {1, 3, 1023, 4097, 20011};
  std::string stranger_refused, no_certificate_refused;
  test::run_cluster<tls_tcp, tls_comm, tls_tcp>(
      cfg, {1, 1},
      [&](tls_comm& comm) {
        BPS_EXPECT(comm.size() == 2, "size {}", comm.size());
        for (int round = 0; round < 4; ++round)
          test::exact_round_every_dtype(comm, sizes, round, 2, "tls: ");
      },
      [&](const Config& job) {
        auto stranger = tls_tcp::options::from(job);
        stranger.cert = pki.path("stranger.pem");
        stranger.key = pki.path("stranger.key");
        stranger_refused = test::refused_with(stranger, job.scheduler_port);
        no_certificate_refused = test::refused_without_certificate(pki, job.scheduler_port);
      });
  CHECK(stranger_refused.ends_with(" failed: tlsv1 alert unknown ca (SSL routines)"));
  CHECK(no_certificate_refused == "tlsv13 alert certificate required (SSL routines)");
  CHECK_THAT(logged.find("unable to get local issuer certificate", std::chrono::seconds(0)),
             Catch::Contains("WARNING tls: dropping connection from 127.0.0.1:") &&
                 Catch::EndsWith(": TLS handshake failed: certificate verify failed (SSL "
                                 "routines): unable to get local issuer certificate"));
  CHECK_THAT(logged.find("peer did not return a certificate", std::chrono::seconds(0)),
             Catch::EndsWith(": TLS handshake failed: peer did not return a certificate (SSL "
                             "routines)"));
}
