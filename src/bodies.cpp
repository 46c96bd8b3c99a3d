// byteps::compiled: the bodies of the functions that are not templates, compiled once here for
// every program that links the library (core/linkage.hpp); the other translation units of the
// library and of its users see their declarations only.
#define BYTEPS_COMPILE_BODIES
#include <byteps/bodies.hpp>
