#pragma once
// Points down: the check accepts it.
#include <byteps/core/reaches_up.hpp>
