#!/usr/bin/env bash
# Resolves Apache Kafka's jars (version pinned in tools/kafka/pom.xml) into target/kafka/<version>/lib
# and builds the harness into target/kafka/<version>/harness.jar. Idempotent: does nothing when both
# are up to date. Needs Java 17+ and Maven; the jars come from Maven Central (cached in ~/.m2).
# Prints the directory on stdout when done. SEGLOG_MAVEN_FLAGS adds flags to the mvn call (e.g.
# "-s my-settings.xml" for a mirror).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$HERE/pom.xml")"
OUT="$REPO/target/kafka/$VERSION"
STAMP="$OUT/.stamp"

fail() { echo "tools/kafka/fetch.sh: $*" >&2; exit 1; }
command -v java >/dev/null || fail "java not found (Java 17+ is needed to run Apache Kafka $VERSION)"
command -v mvn >/dev/null || fail "mvn not found (Maven resolves Apache Kafka $VERSION from Maven Central)"

up_to_date() {
  [ -f "$STAMP" ] && [ -f "$OUT/harness.jar" ] || return 1
  [ -n "$(find "$HERE/pom.xml" "$HERE/harness" -newer "$STAMP" -type f -print -quit)" ] && return 1
  return 0
}
if up_to_date; then echo "$OUT"; exit 0; fi

mkdir -p "$OUT" && rm -rf "$OUT/lib.new"
LOG="$OUT/maven.log"
BUILD="$OUT/classes"
# Resolve first: a failure here is the registry (or the network), reported in one line.
# shellcheck disable=SC2086
if ! mvn -B ${SEGLOG_MAVEN_FLAGS:-} -f "$HERE/pom.xml" -DincludeScope=runtime -DoutputDirectory="$OUT/lib.new" \
     -Dmdep.overWriteReleases=true dependency:copy-dependencies >"$LOG" 2>&1; then
  if grep -qiE "could not transfer|unknown ?host|connect|resolve dependencies|offline" "$LOG"; then
    fail "cannot resolve Apache Kafka $VERSION from Maven Central (no network or registry unreachable); see $LOG"
  fi
  fail "maven could not resolve Apache Kafka $VERSION; see $LOG"
fi
rm -rf "$OUT/lib" && mv "$OUT/lib.new" "$OUT/lib"
rm -rf "$BUILD" && mkdir -p "$BUILD"
if ! javac -nowarn -encoding UTF-8 --release 17 -d "$BUILD" -cp "$OUT/lib/*" \
     $(find "$HERE/harness/src/main/java" -name '*.java') >>"$LOG" 2>&1; then
  fail "the harness does not compile against Apache Kafka $VERSION; see $LOG"
fi
(cd "$BUILD" && jar cf "$OUT/harness.jar.new" .) && mv "$OUT/harness.jar.new" "$OUT/harness.jar"
touch "$STAMP"
echo "$OUT"
