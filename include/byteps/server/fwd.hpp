#pragma once
/// @file
/// The server handlers byteps ships, declared without their definitions, so a program can name
/// `Server<>` or `Server<transport::tcp, server::async_sum>` without the handlers' code
/// (docs/architecture.md, "Compiled mode").

namespace bps::server {

class sync_sum;
class async_sum;
template <class Inner>
class decoding;

}  // namespace bps::server
