// byteps::compiled: the bodies of the functions that are not templates, compiled once here for
// every program that links the library (core/linkage.hpp); the other translation units of the
// library and of its users see their declarations only. So is the TCP link, which every
// transport over TCP uses (transport/tcp/impl/tcp_link.hpp declares it extern).
#define BYTEPS_COMPILE_BODIES
#include <byteps/bodies.hpp>

template class bps::transport::basic_tcp_link<asio::ip::tcp::socket>;
