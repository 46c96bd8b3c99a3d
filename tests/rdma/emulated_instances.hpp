#pragma once
// The communicators, servers and scheduler over the emulated RDMA transport (rdma_pair.hpp's
// emu_rdma) that the RDMA test files use, compiled once (emulated_instances.cpp, in the
// emulated verbs library) rather than in each of them: the tests' own compiled mode, as
// byteps::compiled is the library's (docs/architecture.md, "Compiled mode").
#include <byteps/bodies.hpp>
#include <byteps/transport/rdma/basic_rdma.hpp>

#include "emulated_verbs.hpp"

namespace bps {

extern template class Communicator<transport::basic_rdma<test::emu::emulated_verbs>, local::none>;
extern template class Communicator<transport::basic_rdma<test::emu::emulated_verbs>, local::host>;
extern template class Server<transport::basic_rdma<test::emu::emulated_verbs>,
                             server::decoding<server::sync_sum>>;
extern template class Server<transport::basic_rdma<test::emu::emulated_verbs>, server::async_sum>;
extern template class SchedulerNode<transport::basic_rdma<test::emu::emulated_verbs>>;

}  // namespace bps
