#!/usr/bin/env bash
# Prints the runtime classpath of Apache Kafka (broker + tools + clients + slf4j-simple)
# declared in pom.xml next to this script, or in DIR/pom.xml with `classpath.sh DIR`
# (compat/migration's Kafka Connect and MirrorMaker 2). The first call resolves it with Maven
# (downloading from Maven Central as needed) into target/cp.txt; later calls reuse it.
# All Maven output goes to stderr; stdout carries only the classpath.
set -euo pipefail

HERE="$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")}" && pwd)"
CP_FILE="$HERE/target/cp.txt"

cp_is_valid() {
  [[ -s "$CP_FILE" ]] || return 1
  # The cache is stale if the pom changed after it was written or a jar disappeared.
  [[ "$CP_FILE" -nt "$HERE/pom.xml" ]] || return 1
  local jar
  local IFS=':'
  for jar in $(cat "$CP_FILE"); do
    [[ -f "$jar" ]] || return 1
  done
  return 0
}

if ! cp_is_valid; then
  mkdir -p "$HERE/target"
  tmp="$HERE/target/cp.txt.tmp.$$"
  (
    cd "$HERE"
    mvn -q -B -Dstyle.color=never dependency:build-classpath \
      -Dmdep.includeScope=runtime \
      -Dmdep.outputFile="$tmp" 1>&2
  ) || { rm -f "$tmp"; echo "classpath.sh: mvn dependency:build-classpath failed" >&2; exit 1; }
  [[ -s "$tmp" ]] || { rm -f "$tmp"; echo "classpath.sh: empty classpath" >&2; exit 1; }
  mv -f "$tmp" "$CP_FILE"
fi

cat "$CP_FILE"
echo
