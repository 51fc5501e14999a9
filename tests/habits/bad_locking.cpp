// Locking mistakes that clang's -Wthread-safety must reject in the library's
// annotated code (tests/habits/thread_safety_check.py). Never built: only
// compiled with clang -fsyntax-only, once to see it fail and once with
// -verify, which also requires each `expected-error` comment below to be the
// diagnostic of the line after it, and no other line to have one: the
// correct uses at the end must stay free of errors.
#include "common/mutex.h"

namespace {

using accelerate::detail::CondVar;
using accelerate::detail::Mutex;
using accelerate::detail::MutexLock;

struct Counter {
  Mutex mutex;
  CondVar changed;
  int value GUARDED_BY(mutex) = 0;

  void bump() REQUIRES(mutex) { ++value; }

  // Each mistake the check exists for.
  void write_unlocked() {
    // expected-error@+1 {{writing variable 'value' requires holding mutex 'mutex' exclusively}}
    value = 1;
  }
  int read_unlocked() {
    // expected-error@+1 {{reading variable 'value' requires holding mutex 'mutex'}}
    return value;
  }
  void call_unlocked() {
    // expected-error@+1 {{calling function 'bump' requires holding mutex 'mutex' exclusively}}
    bump();
  }
  void wait_unlocked() {
    // expected-error@+1 {{calling function 'wait' requires holding mutex 'mutex' exclusively}}
    changed.wait(mutex);
  }
  void write_after_scope() {
    {
      MutexLock lock(mutex);
      ++value;
    }
    // expected-error@+1 {{writing variable 'value' requires holding mutex 'mutex' exclusively}}
    value = 2;
  }

  // The same work done right: no diagnostics.
  void write_locked() {
    MutexLock lock(mutex);
    value = 1;
    bump();
  }
  void wait_for_positive() {
    MutexLock lock(mutex);
    while (value <= 0) changed.wait(mutex);
  }
};

}  // namespace

// Uses each member, so that none is reported unused.
int use_counter() {
  Counter counter;
  counter.write_unlocked();
  counter.call_unlocked();
  counter.wait_unlocked();
  counter.write_after_scope();
  counter.write_locked();
  counter.wait_for_positive();
  return counter.read_unlocked();
}
