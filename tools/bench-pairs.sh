#!/usr/bin/env bash
# Alternating pairs of one criterion benchmark of benches/recovery.rs, built from two commits.
#
#   tools/bench-pairs.sh BEFORE AFTER [PAIRS] [FILTER]
#
# Builds the `recovery` bench binary of each commit (sources from `git archive`, one shared
# CARGO_TARGET_DIR so the dependencies are built once), then runs FILTER (default
# `kafka_layout/recover_full_indexes_missing$`) PAIRS times (default 7) with each binary in turn,
# BEFORE first, and prints each pair's ratio before/after (above 1: AFTER is faster) and the
# median. The environment is passed on, e.g. SEGLOG_BENCH_KAFKA_BYTES and
# SEGLOG_BENCH_KAFKA_PRODUCERS=transactional (see benches/recovery.rs); the bench data is cached
# under CARGO_TARGET_DIR and shared by both binaries.
set -euo pipefail

before=${1:?usage: tools/bench-pairs.sh BEFORE AFTER [PAIRS] [FILTER]}
after=${2:?usage: tools/bench-pairs.sh BEFORE AFTER [PAIRS] [FILTER]}
pairs=${3:-7}
filter=${4:-'kafka_layout/recover_full_indexes_missing$'}
repo=$(git rev-parse --show-toplevel)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target}
work=$CARGO_TARGET_DIR/bench-pairs
mkdir -p "$work"

# The bench binary of commit $1, copied to $work/recovery-<commit> (built once per commit).
build() {
    local rev bin src exe
    rev=$(git rev-parse --short "$1")
    bin=$work/recovery-$rev
    if [[ ! -x $bin ]]; then
        src=$work/src-$rev
        rm -rf "$src" && mkdir -p "$src"
        git archive "$rev" | tar -x -C "$src"
        # Cargo names a workspace crate's artifacts alike whatever folder it was built from:
        # forget the other commit's so that this one is really built.
        (cd "$src" && cargo clean -q --release -p record-format -p segment-store -p recovery \
            -p testkit -p seglog)
        exe=$(cd "$src" && cargo bench -q -j "${JOBS:-1}" --bench recovery --no-run \
            --message-format=json | grep '"kind":\["bench"\]' | grep '"name":"recovery"' \
            | grep -o '"executable":"[^"]*"' | tail -1 | cut -d'"' -f4)
        cp "$exe" "$bin"
    fi
    echo "$bin"
}

# Criterion's point estimate of `$filter`, in milliseconds, from one run of binary $1.
run() {
    "$1" --bench "$filter" --noplot 2>/dev/null | awk '
        /time:/ {
            sub(/.*\[/, ""); v = $3; u = $4
            if (u == "s") v *= 1000; else if (u == "µs" || u == "us") v /= 1000
            print v; exit
        }'
}

b=$(build "$before")
a=$(build "$after")
echo "pairs of $filter: $before (before) against $after (after), ${SEGLOG_BENCH_KAFKA_PRODUCERS:-default} producers, ${SEGLOG_BENCH_KAFKA_BYTES:-1 GiB (default)} bytes"
ratios=()
for i in $(seq 1 "$pairs"); do
    tb=$(run "$b")
    ta=$(run "$a")
    r=$(awk -v b="$tb" -v a="$ta" 'BEGIN { printf "%.3f", b / a }')
    ratios+=("$r")
    echo "pair $i: before $tb ms, after $ta ms, before/after $r"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{ r[NR] = $1 } END {
    m = (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
    printf "median before/after over %d pairs: %.3f (min %.3f, max %.3f)\n", NR, m, r[1], r[NR] }'
