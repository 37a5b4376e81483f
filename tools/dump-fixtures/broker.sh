#!/usr/bin/env bash
# Regenerates testdata/kafka-broker/: internal-topic files written by a real Kafka broker (KRaft,
# combined mode, 127.0.0.1 only) while BrokerClient.java creates topics, changes a config, runs a
# transactional producer, consumer groups of both protocols and a share group, and deletes a topic;
# then what Kafka's own DumpLogSegments prints for each file (expected/, as in regen.sh).
# Needs: java 17+, mvn. The broker is stopped (by its pid) before the script ends.
# Usage: tools/dump-fixtures/broker.sh [kafka-version]
set -euo pipefail
KAFKA_VERSION="${1:-${KAFKA_VERSION:-4.3.1}}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$ROOT/tools/dump-fixtures"
OUT="$ROOT/testdata/kafka-broker"
WORK="$(mktemp -d)"
BROKER_PID=""
cleanup() {
  if [ -n "$BROKER_PID" ] && kill -0 "$BROKER_PID" 2>/dev/null; then
    kill "$BROKER_PID"; sleep 5; kill -9 "$BROKER_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

cat > "$WORK/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>seglog</groupId><artifactId>dump-fixtures-broker</artifactId><version>1</version>
<dependencies>
<dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
<dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version></dependency>
</dependencies></project>
POM
(cd "$WORK" && mvn -q dependency:build-classpath -Dmdep.outputFile=cp.txt >&2)
CP="$(cat "$WORK/cp.txt")"
mkdir -p "$WORK/classes"
javac -d "$WORK/classes" -cp "$CP" "$HERE/BrokerClient.java"

DATA="$WORK/data"
sed "s|@DATA@|$DATA|" "$HERE/broker.properties" > "$WORK/server.properties"
java -cp "$CP" kafka.tools.StorageTool format -t MkU3OEVBNTcwNTJENDM2Qk -c "$WORK/server.properties" \
  --standalone > "$WORK/format.log" 2>&1
java -Xmx768m -cp "$CP" kafka.Kafka "$WORK/server.properties" > "$WORK/broker.log" 2>&1 &
BROKER_PID=$!
listening() { (exec 3<>/dev/tcp/127.0.0.1/39092) 2>/dev/null; }
for _ in $(seq 1 60); do
  listening && break
  kill -0 "$BROKER_PID" 2>/dev/null || { tail -20 "$WORK/broker.log" >&2; exit 1; }
  sleep 1
done
listening || { echo "the broker did not start listening" >&2; exit 1; }
timeout 180 java -cp "$WORK/classes:$CP" BrokerClient 2>/dev/null
kill "$BROKER_PID"
for _ in $(seq 1 30); do kill -0 "$BROKER_PID" 2>/dev/null || break; sleep 1; done
BROKER_PID=""

rm -rf "$OUT"
mkdir -p "$OUT/expected"
for d in __consumer_offsets-0 __transaction_state-0 __share_group_state-0 __cluster_metadata-0 orders-0; do
  mkdir -p "$OUT/$d"
  cp "$DATA/$d/00000000000000000000.log" "$OUT/$d/"
done
cp "$DATA/bootstrap.checkpoint" "$OUT/"
# The first and the latest metadata snapshot.
first="$(ls "$DATA/__cluster_metadata-0/" | grep '\.checkpoint$' | sort | head -1)"
last="$(ls "$DATA/__cluster_metadata-0/" | grep '\.checkpoint$' | sort | tail -1)"
cp "$DATA/__cluster_metadata-0/$first" "$DATA/__cluster_metadata-0/$last" "$OUT/__cluster_metadata-0/"
chmod u+w "$OUT"/__cluster_metadata-0/*

{
  echo "offsets|--offsets-decoder|__consumer_offsets-0/00000000000000000000.log"
  echo "transactions|--transaction-log-decoder|__transaction_state-0/00000000000000000000.log"
  echo "share-group-state|--share-group-state-decoder|__share_group_state-0/00000000000000000000.log"
  echo "cluster-metadata|--cluster-metadata-decoder|__cluster_metadata-0/00000000000000000000.log"
  echo "snapshot-first|--cluster-metadata-decoder|__cluster_metadata-0/$first"
  echo "snapshot-last|--cluster-metadata-decoder|__cluster_metadata-0/$last"
  echo "bootstrap|--cluster-metadata-decoder|bootstrap.checkpoint"
  echo "orders|--print-data-log|orders-0/00000000000000000000.log"
  echo "orders-skip-metadata|--print-data-log --skip-record-metadata|orders-0/00000000000000000000.log"
  echo "offsets-json-flags|--offsets-decoder --deep-iteration --skip-record-metadata|__consumer_offsets-0/00000000000000000000.log"
} > "$OUT/expected/cases.txt"
while IFS='|' read -r name flags file; do
  set +e
  # shellcheck disable=SC2086
  (cd "$OUT" && java -cp "$CP" org.apache.kafka.tools.DumpLogSegments $flags --files "$file" \
     > "$OUT/expected/$name.txt" 2> "$WORK/stderr")
  echo $? > "$OUT/expected/$name.code"
  set -e
  grep -v '^SLF4J' "$WORK/stderr" | sed "s|$OUT|@DIR@|g" > "$OUT/expected/$name.stderr" || true
done < "$OUT/expected/cases.txt"
echo "regenerated $OUT with a Kafka $KAFKA_VERSION broker"
