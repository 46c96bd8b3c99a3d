#pragma once
/// @file
/// The local collectives byteps ships for CPUs, declared without their definitions, so a
/// trainer can name `Communicator<transport::standard, local::host>` without the shared-memory
/// code (docs/architecture.md, "Compiled mode").

namespace bps::local {

class none;
class host;

}  // namespace bps::local
