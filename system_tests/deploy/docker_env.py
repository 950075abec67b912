"""A Docker engine and locally built images for the compose tests.

Nothing can be pulled here, and Docker's bridge network must not be used.
So the tests start Debian's ``dockerd`` themselves (own data root, socket,
no bridge, no iptables; the overlay2 storage driver, or vfs where overlay
mounts are refused: vfs copies every layer whole and is several times
slower), make base images with
``debootstrap`` from the Debian mirror apt uses (``docker import``), and
install Python packages into the images from a wheelhouse downloaded on the
host with ``pip download`` from the lock files (pip inside a container would
not trust this machine's TLS interception; the machine's CA is never put into
an image). The images check the same hashes again when they install.

Everything slow is cached under ``$TIERD_CACHE`` (default ~/.cache/tierd):
the engine's data root (so base images and unchanged layers survive between
runs), the wheelhouse. A fresh machine pays about two debootstraps (~2 min)
once.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("TIERD_CACHE", Path.home() / ".cache" / "tierd"))
# The engine's state (images, layers) lives in the cache; its sockets do not.
DATA_ROOT = CACHE / "docker-root"
RUN_DIR = Path("/tmp/tierd-docker")
SOCKET = RUN_DIR / "docker.sock"
DOCKER_HOST = f"unix://{SOCKET}"
WHEELHOUSE = CACHE / "wheelhouse"
MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm"

# Base images: (tag, Debian packages on top of minbase).
PY_BASE = ("tierd-test-base:bookworm", "python3,python3-venv,tini,ca-certificates")
JAVA_BASE = ("tierd-test-java:bookworm",
             "python3,tini,ca-certificates,openjdk-17-jre-headless,zookeeper")
# Debian's Prometheus, run as it is (the test override gives it its config).
PROMETHEUS = ("tierd-test-prometheus:bookworm", "prometheus,ca-certificates")

# Tried in this order (see the module docstring).
STORAGE_DRIVERS = ("overlay2", "vfs")

# Bounds: the engine's start, one debootstrap, one image build.
ENGINE_START_S = 60.0
DEBOOTSTRAP_S = 600.0
BUILD_S = 900.0

# What the images install from the wheelhouse: the broker's own dependencies
# with the build backend (deploy/Dockerfile), and the S3 server for the tests
# (deploy/test/moto.Dockerfile).
LOCKS = ("requirements/app.lock", "requirements/moto.lock")


def env() -> dict[str, str]:
    return {**os.environ, "DOCKER_HOST": DOCKER_HOST}


def docker(*args: str, timeout_s: float = 120.0, check: bool = True
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], env=env(), capture_output=True, text=True,
                          timeout=timeout_s, check=check)


def engine_ready() -> bool:
    try:
        return docker("info", "--format", "{{.ServerVersion}}", timeout_s=10,
                      check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


class Engine:
    """``dockerd`` started for the test session (or one already on our socket)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if engine_ready():
            return
        for driver in STORAGE_DRIVERS:
            if self._start(driver):
                return
        raise RuntimeError("dockerd did not start; see " + str(RUN_DIR / "dockerd.log"))

    def _start(self, driver: str) -> bool:
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        DATA_ROOT.mkdir(parents=True, exist_ok=True)
        log = open(RUN_DIR / "dockerd.log", "ab")  # noqa: SIM115 - lives with the daemon
        self.proc = subprocess.Popen(
            ["dockerd", "--data-root", str(DATA_ROOT), "--exec-root", str(RUN_DIR / "exec"),
             "--host", DOCKER_HOST, "--pidfile", str(RUN_DIR / "dockerd.pid"),
             "--bridge=none", "--iptables=false", "--ip6tables=false",
             f"--storage-driver={driver}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + ENGINE_START_S
        while not engine_ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                return False
            time.sleep(0.5)
        return True

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def has_image(tag: str) -> bool:
    return docker("image", "inspect", tag, check=False).returncode == 0


def ensure_base(tag: str, packages: str) -> None:
    """A Debian minbase image with ``packages``, made with debootstrap once."""
    if has_image(tag):
        return
    rootfs = CACHE / f"rootfs-{tag.replace(':', '-')}"
    shutil.rmtree(rootfs, ignore_errors=True)
    subprocess.run(["debootstrap", "--variant=minbase", f"--include={packages}", SUITE,
                    str(rootfs), MIRROR], check=True, capture_output=True, timeout=DEBOOTSTRAP_S)
    for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for item in (rootfs / leftover).glob("*"):
            if item.is_file():
                item.unlink()
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    subprocess.run(["docker", "import", "-", tag], stdin=tar.stdout, env=env(), check=True,
                   capture_output=True, timeout=DEBOOTSTRAP_S)
    tar.wait()
    shutil.rmtree(rootfs, ignore_errors=True)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked_pins() -> set[tuple[str, str]]:
    """(name, version) of every package the images' lock files pin."""
    pins: set[tuple[str, str]] = set()
    for lock in LOCKS:
        for line in (ROOT / lock).read_text().splitlines():
            if match := re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line):
                pins.add((_normal(match.group(1)), match.group(2)))
    return pins


def wheel_pin(filename: str) -> tuple[str, str]:
    """(name, version) of a wheel file (``name-version-tags.whl``)."""
    name, version = filename.split("-")[:2]
    return _normal(name), version


def ensure_wheelhouse() -> Path:
    """The locked wheels the images install, in deploy/wheelhouse/ (the build
    context); cached wheels are reused."""
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    locks = [arg for lock in LOCKS for arg in ("-r", str(ROOT / lock))]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
                    "--require-hashes", "--no-deps", "--only-binary=:all:",
                    "--dest", str(WHEELHOUSE), *locks],
                   check=True, capture_output=True, timeout=BUILD_S)
    # The cache may hold wheels of versions locked before: only today's go in.
    pins = locked_pins()
    wanted = {p.name for p in WHEELHOUSE.glob("*.whl") if wheel_pin(p.name) in pins}
    # Copied with their times kept, and only when new: an unchanged wheelhouse
    # keeps the image's dependency layer cached.
    target = ROOT / "deploy" / "wheelhouse"
    target.mkdir(exist_ok=True)
    for stale in target.glob("*"):
        if stale.name not in wanted:
            stale.unlink()
    for name in wanted:
        if not (target / name).exists():
            shutil.copy2(WHEELHOUSE / name, target / name)
    return target


def build(tag: str, dockerfile: str, **build_args: str) -> None:
    args = [f"--build-arg={k}={v}" for k, v in build_args.items()]
    result = docker("build", "--network", "host", "-f", dockerfile, "-t", tag, *args, str(ROOT),
                    timeout_s=BUILD_S, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"docker build {tag} failed:\n{result.stdout[-3000:]}\n"
                           f"{result.stderr[-3000:]}")


def build_test_images() -> None:
    """tierd:test (deploy/Dockerfile), tierd-test-zookeeper, tierd-test-moto, and
    Debian's Prometheus."""
    ensure_base(*PY_BASE)
    ensure_base(*JAVA_BASE)
    ensure_base(*PROMETHEUS)
    ensure_wheelhouse()
    build("tierd:test", "deploy/Dockerfile", BASE_IMAGE=PY_BASE[0],
          PIP_INSTALL_ARGS="--no-index --find-links /src/deploy/wheelhouse")
    build("tierd-test-zookeeper", "deploy/test/zookeeper.Dockerfile", BASE_IMAGE=JAVA_BASE[0])
    build("tierd-test-moto", "deploy/test/moto.Dockerfile", BASE_IMAGE=PY_BASE[0])
    docker("image", "prune", "-f", check=False)
