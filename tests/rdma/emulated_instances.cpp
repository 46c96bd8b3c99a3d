// The instantiations emulated_instances.hpp declares, compiled once for the RDMA tests.
#include "emulated_instances.hpp"

namespace bps {

template class Communicator<transport::basic_rdma<test::emu::emulated_verbs>, local::none>;
template class Communicator<transport::basic_rdma<test::emu::emulated_verbs>, local::host>;
template class Server<transport::basic_rdma<test::emu::emulated_verbs>,
                      server::decoding<server::sync_sum>>;
template class Server<transport::basic_rdma<test::emu::emulated_verbs>, server::async_sum>;
template class SchedulerNode<transport::basic_rdma<test::emu::emulated_verbs>>;

}  // namespace bps
