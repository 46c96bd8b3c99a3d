#pragma once
// Certificates for the TLS tests, made at test time with the openssl command in a temporary
// folder (removed after): the job's CA and a node certificate it signed, and a second CA with a
// certificate of its own (a stranger's). EC P-256 keys, one day of validity.
#include <fmt/format.h>

#include <byteps/core/config.hpp>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace bps::test {

class certificates {
 public:
  certificates() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        (std::filesystem::path(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") / "bps-tls-XXXXXX")
            .string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = pattern;
    make_ca("ca");
    make_signed("node", "ca");
    make_ca("other-ca");
    make_signed("stranger", "other-ca");
  }
  certificates(const certificates&) = delete;
  certificates& operator=(const certificates&) = delete;
  ~certificates() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string path(const std::string& file) const { return (dir_ / file).string(); }

  /// `cfg` with the job's CA and the node certificate, as every member of the job has.
  Config member(Config cfg) const {
    cfg.tls_ca = path("ca.pem");
    cfg.tls_cert = path("node.pem");
    cfg.tls_key = path("node.key");
    return cfg;
  }

 private:
  void run(const std::string& args) const {
    const auto command = fmt::format("cd '{}' && '{}' {} >openssl.log 2>&1", dir_.string(),
                                     BYTEPS_OPENSSL_COMMAND, args);
    if (std::system(command.c_str()) != 0) throw std::runtime_error("openssl failed: " + command);
  }
  void make_ca(const std::string& name) const {
    run(
        fmt::format("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
                    "-subj /CN=byteps-test-{0} -keyout {0}.key -out {0}.pem",
                    name));
  }
  void make_signed(const std::string& name, const std::string& ca) const {
    run(
        fmt::format("req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
                    "-subj /CN=byteps-test-{0} -keyout {0}.key -out {0}.csr",
                    name));
    run(
        fmt::format("x509 -req -in {0}.csr -CA {1}.pem -CAkey {1}.key -CAcreateserial -days 1 "
                    "-out {0}.pem",
                    name, ca));
  }

  std::filesystem::path dir_;
};

}  // namespace bps::test
