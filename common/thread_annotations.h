// common/thread_annotations.h - lock contracts written where clang's thread-safety analysis
// (-Wthread-safety) can read them, as LevelDB's port/thread_annotations.h does.
//
// GUARDED_BY(mu) on a member: read or written only while `mu` is held. REQUIRES(mu) on a
// function: its caller holds `mu`. EXCLUDES(mu): its caller does not (the function takes it).
// Under gcc, and under clang without the analysis, every macro expands to nothing: the
// annotations cost nothing and change nothing. The analysis checks them where the lock is a
// capability type (libc++'s std::mutex with _LIBCPP_ENABLE_THREAD_SAFETY_ANNOTATIONS, or a
// wrapper marked CAPABILITY); with libstdc++'s std::mutex they are read by people only.
#pragma once

#if defined(__clang__)
#define BRAID_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define BRAID_THREAD_ANNOTATION(x)
#endif

#ifndef GUARDED_BY
#define GUARDED_BY(x) BRAID_THREAD_ANNOTATION(guarded_by(x))
#endif
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) BRAID_THREAD_ANNOTATION(pt_guarded_by(x))
#endif
#ifndef REQUIRES
#define REQUIRES(...) BRAID_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#endif
#ifndef EXCLUDES
#define EXCLUDES(...) BRAID_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#endif
#ifndef ACQUIRE
#define ACQUIRE(...) BRAID_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#endif
#ifndef RELEASE
#define RELEASE(...) BRAID_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#endif
#ifndef CAPABILITY
#define CAPABILITY(x) BRAID_THREAD_ANNOTATION(capability(x))
#endif
#ifndef SCOPED_CAPABILITY
#define SCOPED_CAPABILITY BRAID_THREAD_ANNOTATION(scoped_lockable)
#endif
#ifndef NO_THREAD_SAFETY_ANALYSIS
#define NO_THREAD_SAFETY_ANALYSIS BRAID_THREAD_ANNOTATION(no_thread_safety_analysis)
#endif
