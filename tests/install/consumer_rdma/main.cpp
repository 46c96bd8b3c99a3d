// A program outside byteps built against an installed byteps with the rdma component: the verbs
// policy over rdma-core compiles and links (libibverbs, librdmacm). It needs no RDMA device: it
// reports the devices it finds and exits 0.
#include <byteps/transport/rdma/rdma.hpp>

#include <cstdio>

static_assert(bps::RdmaVerbs<bps::transport::rdma_core>);
static_assert(bps::Transport<bps::transport::rdma>);

int main() {
  bps::transport::rdma_core verbs;
  const auto devices = verbs.device_names();
  std::printf("consumer_rdma: rdma-core linked; %zu RDMA device(s)%s\n", devices.size(),
              devices.empty() ? " (none here: the transport is tested on the emulation)" : "");
  return 0;
}
