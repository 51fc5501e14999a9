# Sourced by the GPT benches (run_gpt_bench.sh, run_gpt_profile.sh,
# run_gpt_threads.sh): waiting for a quiet machine before a measurement, so
# that other jobs do not slow one side of a pair. Needs MAX_LOAD (the
# 1-minute load average to wait for) and MAX_WAIT (seconds to wait at most,
# then measure anyway with a warning on stderr).

load1() { cut -d' ' -f1 /proc/loadavg; }
busy() { awk -v l="$(load1)" -v m="$MAX_LOAD" 'BEGIN { exit !(l >= m) }'; }
wait_quiet() {
  local waited=0
  while busy && ((waited < MAX_WAIT)); do sleep 10; waited=$((waited + 10)); done
  if busy; then
    printf '  warning: load %s still above %s after %ds; measuring anyway\n' "$(load1)" "$MAX_LOAD" "$waited" >&2
  fi
}
