#!/usr/bin/env bash
# Language in, values out: each tests/lang/NAME.kiln runs with `kiln run` and
# its stdout must equal NAME.out; each tests/stats/NAME.kiln's `kiln ir --stats`
# output must equal NAME.out; each tests/errors/NAME.kiln must fail with
# exit status 1 and its stderr must equal NAME.err (file:line:col, source line,
# caret); each examples/*.kiln must run with exit status 0.
# Usage: run_lang.sh KILN [update]
set -u
kiln=$(cd "$(dirname "$1")" && pwd)/$(basename "$1"); update=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
pass=0; fail=0
check() {  # name, expected file, actual text
  if [ "$update" = update ]; then printf '%s' "$3" > "$2"; fi
  if [ "$3" == "$(cat "$2" 2>/dev/null)" ]; then pass=$((pass+1)); echo "ok   $1"
  else fail=$((fail+1)); echo "FAIL $1"; diff <(printf '%s\n' "$3") "$2" | head -20; fi
}
cd "$here"
for f in lang/*.kiln; do
  out=$(timeout 120 "$kiln" run "$f" 2>&1); rc=$?
  [ $rc -eq 0 ] || out="$out
(exit status $rc)"
  check "$f" "${f%.kiln}.out" "$out"
done
for f in stats/*.kiln; do
  out=$(timeout 120 "$kiln" ir --stats "$f" 2>&1); rc=$?
  [ $rc -eq 0 ] || out="$out
(exit status $rc)"
  check "$f" "${f%.kiln}.out" "$out"
done
root=$(cd "$here/.." && pwd)
for f in errors/*.kiln; do
  err=$(timeout 120 "$kiln" run "$f" 2>&1 >/dev/null); rc=$?
  err=${err//$root\//}   # lib/nn.kiln's errors name it from the checkout: shown from its root
  # Must fail cleanly: status 1, never a crash (>= 128) or a hang (124).
  [ $rc -eq 1 ] || err="$err
(exit status $rc, expected 1)"
  check "$f" "${f%.kiln}.err" "$err"
done
# The shipped examples run cleanly (setup.sh's main job among them): a few
# training steps each (the full runs are measured for the README), in a
# scratch directory, since they save checkpoints.
scratch=$(mktemp -d)
for f in ../examples/*.kiln; do
  out=$(cd "$scratch" && timeout 300 "$kiln" run "$here/$f" --max-steps 3 --eval-examples 300 2>&1); rc=$?
  if [ $rc -eq 0 ]; then pass=$((pass+1)); echo "ok   $f"
  else fail=$((fail+1)); echo "FAIL $f (exit status $rc)"; printf '%s\n' "$out" | tail -5; fi
done
rm -rf "$scratch"
echo "lang: $pass passed, $fail failed"
[ $fail -eq 0 ]
