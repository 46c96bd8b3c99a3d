#pragma once
/// @file
/// Compiled mode (`BYTEPS_COMPILED`): the schedulers whose bodies the library
/// `byteps::compiled` holds (src/scheduler_node.cpp), declared here so no translation unit that
/// uses them instantiates them again. Any other transport is instantiated where it is used,
/// from rendezvous/impl/scheduler_node.hpp.

#include "byteps/rendezvous/scheduler_node.hpp"

namespace bps {

extern template class SchedulerNode<transport::standard>;
extern template class SchedulerNode<transport::tcp>;

}  // namespace bps
