#pragma once
/// @file
/// The two exception types of byteps (as Gloo's I/O error versus enforce failure):
///
/// - `bps::communicator_error`: the communicator (or server) is dead: a peer vanished, a deadline
///   passed, the network failed. Every later call on it throws this too. Recreate it.
/// - `bps::usage_error`: the caller did something wrong (a bad name, mismatched shapes across
///   workers, a bad configuration value). The object stays usable for correct calls.
///
/// Both derive from `bps::error`, so `catch (const bps::error&)` takes everything byteps throws.

#include <stdexcept>
#include <string>

namespace bps {

class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The communicator is dead; recreate it. The message names the peer and the operation.
class communicator_error : public error {
 public:
  using error::error;
};

/// Misuse: bad argument, bad configuration, tensors that disagree across workers.
class usage_error : public error {
 public:
  using error::error;
};

}  // namespace bps
