// Clang's thread-safety annotations, as macros: they let `clang++
// -Wthread-safety` prove at compile time that every member a mutex guards is
// touched only with that mutex held (docs/building.md, "Thread-safety
// annotations"; the habits.thread_safety test runs the check). Other
// compilers see nothing: each macro expands to nothing there.
//
// Internal to the library (src/): the names are short and unprefixed, so no
// public header may include this.
#pragma once

#if defined(__clang__)
#define ACCELERATE_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define ACCELERATE_THREAD_ANNOTATION(x)
#endif

// On a class: its objects are capabilities (locks) the analysis tracks.
#define CAPABILITY(name) ACCELERATE_THREAD_ANNOTATION(capability(name))
// On an RAII class: it acquires a capability for its lifetime.
#define SCOPED_CAPABILITY ACCELERATE_THREAD_ANNOTATION(scoped_lockable)

// On a data member: read or written only with `mutex` held.
#define GUARDED_BY(mutex) ACCELERATE_THREAD_ANNOTATION(guarded_by(mutex))
// On a pointer member: what it points to is touched only with `mutex` held.
#define PT_GUARDED_BY(mutex) ACCELERATE_THREAD_ANNOTATION(pt_guarded_by(mutex))
// On a mutex member: the lock order between two mutexes (checked only by
// clang's -Wthread-safety-beta, documentation otherwise).
#define ACQUIRED_BEFORE(...) ACCELERATE_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) ACCELERATE_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))

// On a function: its callers must hold (REQUIRES) / must not hold
// (EXCLUDES) these mutexes.
#define REQUIRES(...) ACCELERATE_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) ACCELERATE_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

// On a function: it locks / unlocks these mutexes (no argument: `this`),
// and returns with them held / released.
#define ACQUIRE(...) ACCELERATE_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) ACCELERATE_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
// On a function: returns with the mutex held iff it returned `result`.
#define TRY_ACQUIRE(...) ACCELERATE_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// On a function: from its call on, the analysis assumes the mutex is held
// (for code that holds it in ways the analysis cannot see).
#define ASSERT_CAPABILITY(mutex) ACCELERATE_THREAD_ANNOTATION(assert_capability(mutex))
// On a function: it returns this mutex (lets an accessor stand for a member).
#define RETURN_CAPABILITY(mutex) ACCELERATE_THREAD_ANNOTATION(lock_returned(mutex))

// On a function: no checking inside it. Only with a comment saying why the
// analysis cannot follow the locking there.
#define NO_THREAD_SAFETY_ANALYSIS ACCELERATE_THREAD_ANNOTATION(no_thread_safety_analysis)
