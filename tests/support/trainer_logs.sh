# Sourced by the example tests that compare what the Trainer logged. Its
# console lines show 4 digits of each number, as transformers' do; the runs
# pass --report_to jsonl, whose lines (OUTPUT_DIR/.../metrics.jsonl) hold
# every digit. Gives:
#   logged KEY DIR   every value of KEY logged in output folder DIR, in order, a line each
#   step_logs DIR    each training log's values (a JSON object: epoch, grad_norm,
#                    learning_rate, loss), a line each
logged() {
  find "$2" -name metrics.jsonl -exec cat {} + | grep -oE "\"$1\":[^,}]+" | cut -d: -f2
}
step_logs() {
  find "$1" -name metrics.jsonl -exec cat {} + | grep '"loss":' | grep -oE '"values":\{[^}]*\}'
}
