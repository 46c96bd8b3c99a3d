// byteps::compiled: the schedulers, instantiated once for every
// program that links the library (include/byteps/*/*_instances.hpp declares them extern).
#include <byteps/bodies.hpp>

namespace bps {

template class SchedulerNode<transport::standard>;
template class SchedulerNode<transport::tcp>;

}  // namespace bps
