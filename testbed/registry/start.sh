#!/usr/bin/env bash
# Start / stop a genuine Apicurio Registry 2.4.2.Final (Confluent-compatible API under
# /apis/ccompat/v7) on 127.0.0.1 and a free port, in-memory H2 storage.
#
#   ./start.sh            start in the background, wait until it answers, print URL and PID
#   ./start.sh stop       stop the instance started by this script (by its pid)
#   ./start.sh build      build the runner jar only (Maven Central, ~210 MB the first time)
#
# Env: JAVA_HOME (default: Java 17), REGISTRY_HEAP (default 256m),
#      REGISTRY_COMPATIBILITY (global default compatibility, default BACKWARD as in
#      Confluent's registry; "NONE" keeps Apicurio's own default),
#      REGISTRY_STATE (folder for pid/url/log, default $TMPDIR/eosflow-registry),
#      REGISTRY_START_TIMEOUT (seconds, default 120).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RUNNER_DIR="$HERE"
JAR="$RUNNER_DIR/target/apicurio-runner-1-runner.jar"
JAVA_HOME="${JAVA_HOME:-/usr/lib/jvm/java-17-openjdk-amd64}"
HEAP="${REGISTRY_HEAP:-256m}"
COMPAT="${REGISTRY_COMPATIBILITY:-BACKWARD}"
STATE="${REGISTRY_STATE:-${TMPDIR:-/tmp}/eosflow-registry}"
TIMEOUT="${REGISTRY_START_TIMEOUT:-120}"
mkdir -p "$STATE"

build() {
  # Resolves apicurio-registry-app 2.4.2.Final (+ everit-json-schema from com.github.erosb)
  # from Maven Central only, and runs the Quarkus 2.16.4.Final augmentation (legacy-jar).
  echo "building $JAR ..." >&2
  (cd "$RUNNER_DIR" && JAVA_HOME="$JAVA_HOME" nice -n 10 mvn -B -ntp -q -s settings.xml package -DskipTests) >&2
}

stop() {
  [ -f "$STATE/pid" ] || { echo "no pid file in $STATE" >&2; return 0; }
  local pid; pid="$(cat "$STATE/pid")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; echo "killed $pid (SIGKILL)" >&2
    else echo "stopped $pid" >&2; fi
  fi
  rm -f "$STATE/pid" "$STATE/url"
}

start() {
  if [ -f "$STATE/pid" ] && kill -0 "$(cat "$STATE/pid")" 2>/dev/null; then
    echo "already running: pid $(cat "$STATE/pid") $(cat "$STATE/url" 2>/dev/null)" >&2; return 1
  fi
  [ -f "$JAR" ] || build
  local log="$STATE/registry.log" t0 pid base=""
  t0=$(date +%s.%N)
  # quarkus.http.port=0: the OS picks a free port (no race); the log names it.
  setsid "$JAVA_HOME/bin/java" -Xmx"$HEAP" \
    -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port=0 \
    -Dregistry.rules.global.compatibility="$COMPAT" \
    -jar "$JAR" >"$log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$STATE/pid"
  local deadline=$(( $(date +%s) + TIMEOUT ))
  while [ -z "$base" ]; do
    kill -0 "$pid" 2>/dev/null || { echo "registry exited; log tail:" >&2; tail -30 "$log" >&2; rm -f "$STATE/pid"; return 1; }
    [ "$(date +%s)" -lt "$deadline" ] || { echo "no 'Listening on' within ${TIMEOUT}s" >&2; stop; return 1; }
    base=$(grep -o 'Listening on: http://127\.0\.0\.1:[0-9]*' "$log" | head -1 | sed 's/Listening on: //') || true
    [ -n "$base" ] || sleep 0.2
  done
  local url="$base/apis/ccompat/v7"
  until [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/subjects")" = 200 ]; do
    kill -0 "$pid" 2>/dev/null || { echo "registry exited" >&2; tail -30 "$log" >&2; rm -f "$STATE/pid"; return 1; }
    [ "$(date +%s)" -lt "$deadline" ] || { echo "not answering within ${TIMEOUT}s" >&2; stop; return 1; }
    sleep 0.2
  done
  if [ "$COMPAT" != NONE ]; then
    # the property above enforces it from the first request; this makes GET /config say so too
    curl -sf -X PUT -H 'Content-Type: application/vnd.schemaregistry.v1+json' \
      -d "{\"compatibility\":\"$COMPAT\"}" "$url/config" >/dev/null
  fi
  echo "$url" >"$STATE/url"
  echo "ready in $(python3 -c "import time;print(round(time.time()-$t0,2))")s, rss $(ps -o rss= -p "$pid" | tr -d ' ') KiB" >&2
  echo "REGISTRY_URL=$url"
  echo "REGISTRY_PID=$pid"
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  build) build ;;
  *) echo "usage: $0 [start|stop|build]" >&2; exit 2 ;;
esac
