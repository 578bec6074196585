// Whether the tests run under ASan or TSan (GCC defines __SANITIZE_*, clang has
// __has_feature): the stress tests then run fewer events; KINO_TRACE_TEST_TSAN under TSan.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KINO_TRACE_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KINO_TRACE_TEST_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define KINO_TRACE_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KINO_TRACE_TEST_TSAN 1
#endif
#endif

namespace kino_trace::test {
#ifdef KINO_TRACE_TEST_SANITIZED
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
}  // namespace kino_trace::test
