#pragma once
/// @file
/// Where the bodies of byteps's functions that are not templates are compiled, as Asio's
/// separate compilation does it.
///
/// A header declares such a function `BYTEPS_DECL` and keeps its body in the header's `impl/`
/// file, which it includes when `BYTEPS_INCLUDE_BODIES` is 1:
///
///   - header-only (the default): `BYTEPS_DECL` is `inline` and every header brings its bodies;
///   - compiled mode (`BYTEPS_COMPILED`, target `byteps::compiled`): `BYTEPS_DECL` is empty and
///     a header brings declarations only; the bodies are compiled once, into the library, by
///     its one translation unit that defines `BYTEPS_COMPILE_BODIES` (src/bodies.cpp).
///
/// Templates and functions that must inline (the kernels a loop calls per element, `constexpr`)
/// keep their bodies in their headers.

#if defined(BYTEPS_COMPILED)
#define BYTEPS_DECL
#if defined(BYTEPS_COMPILE_BODIES)
#define BYTEPS_INCLUDE_BODIES 1
#else
#define BYTEPS_INCLUDE_BODIES 0
#endif
#else
#define BYTEPS_DECL inline
#define BYTEPS_INCLUDE_BODIES 1
#endif
