#pragma once
/// @file
/// Compiled mode (`BYTEPS_COMPILED`): the communicators whose bodies the library
/// `byteps::compiled` holds (src/communicator_*.cpp), declared here so no translation unit
/// that uses them instantiates them again. Any other policies are instantiated where they are
/// used, from worker/impl/communicator.hpp.

#include "byteps/worker/communicator.hpp"

namespace bps {

extern template class Communicator<transport::standard, local::none>;
extern template class Communicator<transport::standard, local::host>;
extern template class Communicator<transport::tcp, local::none>;
extern template class Communicator<transport::tcp, local::host>;

}  // namespace bps
