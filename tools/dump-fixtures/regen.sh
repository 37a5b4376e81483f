#!/usr/bin/env bash
# Regenerates testdata/kafka-internal/: internal-topic log segments and a KRaft snapshot written
# with Kafka's own classes (DumpFixtures.java), and what Kafka's own DumpLogSegments prints for
# each of them (the expected/*.txt files the Rust tests compare `seglog dump` with).
# Needs: java 17+, mvn (resolves Kafka's jars from Maven Central). The Rust tests need neither.
# Usage: tools/dump-fixtures/regen.sh [kafka-version]
set -euo pipefail
KAFKA_VERSION="${1:-${KAFKA_VERSION:-4.3.1}}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="$ROOT/testdata/kafka-internal"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

cat > "$WORK/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>seglog</groupId><artifactId>dump-fixtures</artifactId><version>1</version>
<dependencies><dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId>
<version>$KAFKA_VERSION</version></dependency></dependencies></project>
POM
(cd "$WORK" && mvn -q dependency:build-classpath -Dmdep.outputFile=cp.txt >&2)
CP="$(cat "$WORK/cp.txt")"
mkdir -p "$WORK/classes"
javac -d "$WORK/classes" -cp "$CP" "$ROOT/tools/dump-fixtures/DumpFixtures.java"

rm -rf "$OUT"
mkdir -p "$OUT/expected"
java -cp "$WORK/classes:$CP" DumpFixtures "$OUT" 2>/dev/null

# name | flags | file (relative to $OUT). Kafka prints the path it is given, so it runs from $OUT.
CASES="
offsets|--offsets-decoder|__consumer_offsets-0/00000000000000000000.log
offsets-skip-metadata|--offsets-decoder --skip-record-metadata|__consumer_offsets-0/00000000000000000000.log
offsets-plain|--print-data-log|__consumer_offsets-0/00000000000000000000.log
transactions|--transaction-log-decoder|__transaction_state-0/00000000000000000000.log
share-group-state|--share-group-state-decoder|__share_group_state-0/00000000000000000000.log
cluster-metadata|--cluster-metadata-decoder|__cluster_metadata-0/00000000000000000000.log
cluster-metadata-snapshot|--cluster-metadata-decoder|__cluster_metadata-0/00000000000000000030-0000000002.checkpoint
remote-log-metadata|--remote-log-metadata-decoder|__remote_log_metadata-0/00000000000000000000.log
value-decoder-class|--key-decoder-class org.apache.kafka.tools.api.StringDecoder --value-decoder-class org.apache.kafka.tools.api.StringDecoder|__transaction_state-0/00000000000000000000.log
kafka2-timeindex|--print-data-log|kafka2-timeindex/00000000000000000000.timeindex
kafka2-timeindex-verify|--verify-index-only|kafka2-timeindex/00000000000000000000.timeindex
"
echo "$CASES" | while IFS='|' read -r name flags file; do
  [ -n "$name" ] || continue
  # shellcheck disable=SC2086
  # stdout, stderr (absolute paths written as @DIR@, SLF4J's start-up lines dropped), exit code.
  set +e
  (cd "$OUT" && java -cp "$CP" org.apache.kafka.tools.DumpLogSegments $flags --files "$file" \
     > "expected/$name.txt" 2> "$WORK/stderr")
  echo $? > "$OUT/expected/$name.code"
  set -e
  grep -v '^SLF4J' "$WORK/stderr" | sed "s|$OUT|@DIR@|g" > "$OUT/expected/$name.stderr" || true
  printf '%s|%s|%s\n' "$name" "$flags" "$file" >> "$OUT/expected/cases.txt"
done
echo "regenerated $OUT with Kafka $KAFKA_VERSION"
