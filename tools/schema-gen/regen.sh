#!/usr/bin/env bash
# Regenerates src/cli/dump/decoders/generated/*.rs from Kafka's message schema JSON files.
#
# The schemas ship inside Kafka's jars; this script resolves the jars of KAFKA_VERSION from Maven
# Central (mvn dependency:get), extracts their *.json schema files to a temporary directory, runs
# the generator and formats its output. The schemas are never committed; the generated code is.
# Needs: mvn, unzip, cargo. Usage: tools/schema-gen/regen.sh [kafka-version]
set -euo pipefail
KAFKA_VERSION="${1:-${KAFKA_VERSION:-4.3.1}}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
M2="${M2_REPO:-$HOME/.m2/repository}/org/apache/kafka"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

jar() { # artifact -> extracted dir
  local a="$1"
  local j="$M2/$a/$KAFKA_VERSION/$a-$KAFKA_VERSION.jar"
  if [ ! -f "$j" ]; then
    mvn -q dependency:get -Dtransitive=false -Dartifact="org.apache.kafka:$a:$KAFKA_VERSION" >&2
  fi
  mkdir -p "$WORK/$a"
  unzip -qo "$j" '*.json' -d "$WORK/$a"
  echo "$WORK/$a"
}

GROUP="$(jar kafka-group-coordinator)/common/message"
TXN="$(jar kafka-transaction-coordinator)/common/message"
SHARE="$(jar kafka-share-coordinator)/common/message"
META="$(jar kafka-metadata)/common/metadata"
STORAGE="$(jar kafka-storage)/message"
CLIENTS="$(jar kafka-clients)/common/message"

OUT="$ROOT/src/cli/dump/decoders/generated"
cd "$ROOT"
cargo run -q -p schema-gen -- "$OUT" \
  "group=$GROUP" \
  "transaction=$TXN:TransactionLog" \
  "share=$SHARE:Share" \
  "metadata=$META" \
  "remote=$STORAGE:RemoteLogSegment,RemotePartition" \
  "clients=$CLIENTS:ConsumerProtocol,LeaderChangeMessage,SnapshotHeaderRecord,SnapshotFooterRecord,KRaftVersionRecord,VotersRecord"
rustfmt --edition 2021 "$OUT"/*.rs
echo "regenerated from Kafka $KAFKA_VERSION: $(ls "$OUT" | tr '\n' ' ')"
