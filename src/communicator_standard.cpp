// byteps::compiled: the communicators over transport::standard (ipc<tcp>), instantiated once for every
// program that links the library (include/byteps/*/*_instances.hpp declares them extern).
#include <byteps/bodies.hpp>

namespace bps {

template class Communicator<transport::standard, local::none>;
template class Communicator<transport::standard, local::host>;

}  // namespace bps
