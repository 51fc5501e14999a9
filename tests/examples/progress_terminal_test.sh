#!/usr/bin/env bash
# Progress bars under `accelerate launch`: with the launcher on a terminal
# (a pseudo-terminal here), the local main process draws the Trainer's bar on
# it, through ACCELERATE_PROGRESS_TTY, although its own stderr is the
# launcher's pipe; with the launcher's output in a pipe, no bar is drawn and
# no terminal control reaches the output.
# Usage: progress_terminal_test.sh ACCELERATE_CLI TRAINER_BINARY
set -euo pipefail
cli=$1 program=$2
python=/usr/bin/python3
[[ -x $python ]] || { echo "SKIPPED: $python is not installed"; exit 0; }
work=$(mktemp -d /tmp/accelerate-progress.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
launch=("$cli" launch --cpu --num_processes 2 --main_process_port 0 "$program")

# Everything the command writes to its terminal, as bytes (escapes shown).
"$python" - "${launch[@]}" >"$work/terminal.txt" <<'PY'
import os, pty, sys
pid, fd = pty.fork()
if pid == 0:
    os.environ["COLUMNS"] = "100"
    os.execv(sys.argv[1], sys.argv[1:])
out = b""
while True:
    try:
        chunk = os.read(fd, 65536)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
_, status = os.waitpid(pid, 0)
sys.stdout.write(repr(out.decode("utf-8", "replace")) + "\n")
sys.exit(os.waitstatus_to_exitcode(status))
PY
terminal=$(cat "$work/terminal.txt")
# assert: the run finished, printed its result once, and drew the bar to its end
grep -q "final eval_loss" <<<"$terminal" || { echo "FAIL: no result on the terminal: $terminal"; exit 1; }
# (160 steps: 20 epochs of 512 samples in batches of 32 on each of 2 processes)
grep -qE "160/160 \[" <<<"$terminal" || { echo "FAIL: no progress bar on the terminal: $terminal"; exit 1; }
grep -qF '\r' <<<"$terminal" || { echo "FAIL: the bar was never redrawn: $terminal"; exit 1; }
echo "on a terminal: the bar was drawn ($(grep -oE '[0-9]+/160 \[' <<<"$terminal" | wc -l) frames)"

piped=$("${launch[@]}" 2>&1 | cat)
# assert: in a pipe, the same run draws nothing
grep -q "final eval_loss" <<<"$piped" || { echo "FAIL: no result in the pipe: $piped"; exit 1; }
if grep -qE "/160 \[" <<<"$piped" || [[ "$piped" == *$'\r'* || "$piped" == *$'\033'* ]]; then
  echo "FAIL: a bar or terminal control in piped output: $piped"
  exit 1
fi
echo "in a pipe: no bar, no terminal control"
