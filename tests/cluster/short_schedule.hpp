#pragma once
// Under a sanitizer every instrumented byte costs 5-20 times more. The few tests that loop over
// large tensors run fewer rounds there (still more than one, so state carried from round to
// round is checked), so that each stays under a third of its timeout on a loaded 2-core machine;
// the plain suite runs the full count. CMake's BYTEPS_TEST_SHORT option (on in sanitized builds)
// decides, for these tests and the process tests alike.

namespace bps::test {

#if defined(BYTEPS_TEST_SHORT) && BYTEPS_TEST_SHORT
inline constexpr bool short_schedule = true;
#else
inline constexpr bool short_schedule = false;
#endif

/// `full` rounds in the plain suite, `short_rounds` on the short schedule.
constexpr int rounds(int full, int short_rounds) { return short_schedule ? short_rounds : full; }

}  // namespace bps::test
