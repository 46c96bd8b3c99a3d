#pragma once
// Under a sanitizer every instrumented byte costs 5-20 times more. The few tests that loop over
// large tensors run fewer rounds there (still more than one, so state carried from round to
// round is checked), so that each stays under a third of its timeout on a loaded 2-core machine;
// the plain suite runs the full count.

namespace bps::test {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool sanitized = true;
#else
inline constexpr bool sanitized = false;
#endif
#else
inline constexpr bool sanitized = false;
#endif

/// `full` rounds in the plain suite, `short_rounds` under a sanitizer.
constexpr int rounds(int full, int short_rounds) { return sanitized ? short_rounds : full; }

}  // namespace bps::test
