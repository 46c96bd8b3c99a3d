// byteps::compiled: the servers over transport::tcp, instantiated once for every
// program that links the library (include/byteps/*/*_instances.hpp declares them extern).
#include <byteps/bodies.hpp>

namespace bps {

template class Server<transport::tcp, server::decoding<server::sync_sum>>;
template class Server<transport::tcp, server::async_sum>;

}  // namespace bps
