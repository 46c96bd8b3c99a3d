#pragma once
/// @file
/// The transports byteps ships, declared without their definitions, and `options_t<T>`, a
/// transport's options type known without its definition. A trainer names
/// `Communicator<transport::tcp>` with this header alone; Asio and the sockets stay in the
/// headers that define the transports (tcp.hpp, ipc.hpp, ...), which only the code that builds
/// a communicator includes (docs/architecture.md, "Compiled mode").

#include "byteps/transport/ipc/ipc_options.hpp"
#include "byteps/transport/tcp/tcp_options.hpp"

namespace bps::transport {

class tcp;
template <class Inner>
class ipc;

/// The transport of a `Communicator<>` or `Server<>` that names none (transport/standard.hpp).
using standard = ipc<tcp>;

/// `T::options`, for a transport whose definition may not be visible here. A transport of one's
/// own needs nothing: its definition is visible where it is named.
template <class T>
struct options_of {
  using type = typename T::options;
};
template <class T>
using options_t = typename options_of<T>::type;

template <>
struct options_of<tcp> {
  using type = tcp_options;
};
template <class Inner>
struct options_of<ipc<Inner>> {
  using type = ipc_options<options_t<Inner>>;
};

}  // namespace bps::transport
