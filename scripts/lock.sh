#!/usr/bin/env bash
# Write the locked dependency set (requirements/*.lock, with hashes) from
# pyproject.toml. One resolution, three views of it:
#
#   requirements/test.lock  everything: the broker's dependencies, the test
#                           extras and the build backend. `make test` and
#                           `make run` install it into .venv/.
#   requirements/app.lock   the broker's own dependencies and the build backend,
#                           pinned to test.lock's versions: the Docker image.
#   requirements/moto.lock  moto's S3 server, pinned likewise: the compose
#                           tests' S3 image.
#
# Pins already in test.lock are kept unless UPGRADE=1 (every package to the
# newest version pyproject allows) or UPGRADE_PACKAGE=name (that one only).
# uv does the resolving; it is installed at a pinned version into .deps/uv/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
UV_VERSION="0.13.8"
UV_DIR="$ROOT/.deps/uv"
UV="$UV_DIR/bin/uv"
# pyproject's [build-system] requires, locked with the rest so the image and
# the editable install build tierd with a known setuptools.
BUILD_REQUIRES="setuptools>=68"

log() { printf '[lock] %s\n' "$*" >&2; }

if [[ ! -x "$UV" ]] || [[ "$("$UV" --version | cut -d' ' -f2)" != "$UV_VERSION" ]]; then
    log "installing uv $UV_VERSION into $UV_DIR"
    python3 -m venv "$UV_DIR"
    "$UV_DIR/bin/pip" install -q --disable-pip-version-check "uv==$UV_VERSION"
fi

upgrade=()
[[ "${UPGRADE:-0}" == 1 ]] && upgrade+=(--upgrade)
[[ -n "${UPGRADE_PACKAGE:-}" ]] && upgrade+=(--upgrade-package "$UPGRADE_PACKAGE")

compile() {
    # compile OUTPUT [uv pip compile arguments...]: Python 3.11 and newer, any platform.
    local out="$1"; shift
    (cd "$ROOT" && "$UV" pip compile -q --universal --python-version 3.11 --generate-hashes \
        --custom-compile-command "make lock" -o "$out" "$@")
}

compile requirements/test.lock "${upgrade[@]}" --extra test pyproject.toml - <<<"$BUILD_REQUIRES"
compile requirements/app.lock -c requirements/test.lock pyproject.toml - <<<"$BUILD_REQUIRES"
compile requirements/moto.lock -c requirements/test.lock - <<<"moto[server]"
log "wrote requirements/{test,app,moto}.lock: $(grep -c '^[a-z]' "$ROOT/requirements/test.lock") packages"
