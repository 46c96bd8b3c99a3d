#pragma once
// The communicators, servers and scheduler over transport::faulty<tcp> that several cluster test
// files use, compiled once (faulty_instances.cpp) rather than in each of them: the tests' own
// compiled mode, as byteps::compiled is the library's (docs/architecture.md, "Compiled mode").
#include <byteps/bodies.hpp>
#include <byteps/transport/faulty/faulty.hpp>

namespace bps {

extern template class Communicator<transport::faulty<transport::tcp>, local::none>;
extern template class Communicator<transport::faulty<transport::tcp>, local::host>;
extern template class Server<transport::faulty<transport::tcp>,
                             server::decoding<server::sync_sum>>;
extern template class Server<transport::faulty<transport::tcp>, server::async_sum>;
extern template class SchedulerNode<transport::faulty<transport::tcp>>;

}  // namespace bps
