// The instantiations faulty_instances.hpp declares, compiled once for the cluster tests.
#include "faulty_instances.hpp"

namespace bps {

template class Communicator<transport::faulty<transport::tcp>, local::none>;
template class Communicator<transport::faulty<transport::tcp>, local::host>;
template class Server<transport::faulty<transport::tcp>, server::decoding<server::sync_sum>>;
template class Server<transport::faulty<transport::tcp>, server::async_sum>;
template class SchedulerNode<transport::faulty<transport::tcp>>;

}  // namespace bps
