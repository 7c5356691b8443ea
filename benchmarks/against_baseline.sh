#!/usr/bin/env bash
# One run, two trees: each benchmark on a baseline revision (a temporary git worktree) and then on
# this checkout, back to back, so the two figures share the machine's state of the moment (this
# VM's speed drifts by up to 2x within an hour; compare rows within one run only).
#
#   bash benchmarks/against_baseline.sh REV [emulator report parse dispatch]
#
# Both trees run with this checkout's .venv; PYTHONPATH puts each tree's own bench/ and runners/
# first (the editable install's finder comes after sys.path). dispatch needs the testbed up.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: $0 REV [emulator report parse dispatch]}
shift
benches=("$@")
[ ${#benches[@]} -gt 0 ] || benches=(emulator report parse)
py=$PWD/.venv/bin/python
base=$(mktemp -d /tmp/bench-baseline.XXXXXX)
trap 'git worktree remove --force "$base" >/dev/null 2>&1 || true' EXIT
git worktree add --detach -q "$base" "$rev"
[ -d .testbed ] && ln -s "$PWD/.testbed" "$base/.testbed"  # dispatch: the one running testbed
run() {  # run TREE LABEL ARGS...
  local tree=$1 label=$2
  shift 2
  echo "---- $label ($(git -C "$tree" rev-parse --short HEAD))"
  (cd "$tree" && PYTHONPATH="$tree" "$py" "$@") 2>&1 | tail -n 25
}
for b in "${benches[@]}"; do
  case $b in
    emulator) args=(benchmarks/emulator_bench.py --quick) ;;
    report) args=(benchmarks/report_bench.py --cases three) ;;
    parse) args=(benchmarks/parse_bench.py --framework verl --size-gb 0.5) ;;
    dispatch) args=(benchmarks/dispatch_bench.py --cluster testbed) ;;
    *) echo "unknown benchmark $b" >&2; exit 2 ;;
  esac
  echo "==== $b: ${args[*]}"
  run "$base" baseline "${args[@]}"
  run "$PWD" current "${args[@]}"
done
