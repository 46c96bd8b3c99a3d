#pragma once
// Points up (core/ above worker/): the check must name this file, line 4 and both layers.
#include <cstddef>
#include "byteps/worker/uses_core.hpp"
