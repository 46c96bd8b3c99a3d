#pragma once
/// @file
/// Compiled mode (`BYTEPS_COMPILED`): the servers whose bodies the library `byteps::compiled`
/// holds (src/server_*.cpp), declared here so no translation unit that uses them instantiates
/// them again. Any other transport or handler is instantiated where it is used, from
/// server/impl/server.hpp.

#include "byteps/server/server.hpp"

namespace bps {

extern template class Server<transport::standard, server::decoding<server::sync_sum>>;
extern template class Server<transport::standard, server::async_sum>;
extern template class Server<transport::tcp, server::decoding<server::sync_sum>>;
extern template class Server<transport::tcp, server::async_sum>;

}  // namespace bps
