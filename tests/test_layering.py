"""protocol/ is sans-I/O: importing it pulls in no trio, none of our I/O packages, opens nothing.

Each check runs in a fresh interpreter so modules other tests imported do not hide a
regression.
"""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORE_MODULES = ["protocol.api", "protocol.records", "protocol.framing", "protocol.errors"]
# Every module in protocol/, including ones added later (listed without importing them).
PROTOCOL_MODULES = ["protocol"] + sorted(
    f"protocol.{m.name}" for m in pkgutil.iter_modules([os.path.join(REPO, "protocol")]))
OUR_IO_PACKAGES = ("broker", "storage", "replication", "config")

# Runs in the child: records files our own code opens and sockets anyone creates while the
# modules are imported. Files opened by the import system or by kafka-python (its JSON
# schemas) are not ours and are ignored.
_PROBE = r"""
import importlib, json, os, sys
repo = sys.argv[1]
ours = tuple(os.path.join(repo, p) + os.sep for p in ("protocol", "broker", "storage",
                                                       "replication", "config"))
events = []
def hook(event, args):
    if event in ("open", "os.open") or event.startswith("socket."):
        caller = sys._getframe(1).f_code.co_filename
        if event.startswith("socket.") or caller.startswith(ours):
            events.append([event, str(args[0]) if args else "", caller])
sys.addaudithook(hook)
for name in sys.argv[2:]:
    if name.startswith("exec:"):  # self-test: code that claims to live in protocol/
        exec(compile(name[5:], os.path.join(repo, "protocol", "probe_selftest.py"), "exec"))
    else:
        importlib.import_module(name)
print(json.dumps({"modules": sorted(sys.modules), "events": events}))
"""


def _import_in_fresh_interpreter(*modules: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE, REPO, *modules], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", PROTOCOL_MODULES)
def test_protocol_module_imports_no_io(module):
    result = _import_in_fresh_interpreter(module)
    loaded = result["modules"]
    assert module in loaded
    assert "trio" not in loaded
    assert not [m for m in loaded if m.split(".")[0] in OUR_IO_PACKAGES]
    assert result["events"] == []


def test_core_modules_are_covered():
    assert set(CORE_MODULES) <= set(PROTOCOL_MODULES)


def test_all_protocol_modules_together():
    result = _import_in_fresh_interpreter(*PROTOCOL_MODULES)
    assert "trio" not in result["modules"]
    assert result["events"] == []


def test_probe_detects_trio_our_packages_files_and_sockets():
    # The probe itself must be able to fail: storage.log.log imports trio and config, and
    # code attributed to protocol/ that opens a file or a socket is reported.
    result = _import_in_fresh_interpreter(
        "storage.log.log",
        "exec:open(__import__('os').devnull).close()\n"
        "__import__('socket').socket().close()",
    )
    assert "trio" in result["modules"]
    assert "config.topic" in result["modules"]
    assert [e[0] for e in result["events"]][:1] == ["open"]
    assert any(e[0].startswith("socket.") for e in result["events"])


# storage/ is below replication/ and broker/: it defines the interfaces they
# implement (e.g. rlmm_api.MetadataLog, read_pool.ReadCompletion) and never imports them.
STORAGE_MODULES = sorted(
    os.path.relpath(os.path.join(root, name), REPO)[:-3].replace(os.sep, ".")
    for root, _, names in os.walk(os.path.join(REPO, "storage"))
    for name in names if name.endswith(".py") and name != "__init__.py")


def test_storage_imports_neither_replication_nor_broker():
    result = _import_in_fresh_interpreter(*STORAGE_MODULES)
    assert "storage.remote.read_pool" in result["modules"]
    assert not [m for m in result["modules"] if m.split(".")[0] in ("replication", "broker")]
