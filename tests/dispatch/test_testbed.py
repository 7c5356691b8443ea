"""The local Slurm testbed itself: its nodes, fake GPUs, private config, idempotent start."""

from __future__ import annotations

import subprocess

import pytest

from bench import testbed as tb_mod

pytestmark = pytest.mark.slurm


def _scontrol(tb, *args: str) -> str:
    return subprocess.run(
        ["scontrol", *args], capture_output=True, text=True, env=tb.env(), check=True
    ).stdout


def test_every_node_is_idle_with_eight_fake_h100(testbed):
    states = tb_mod.node_states(testbed)
    assert sorted(states) == [f"n{k}" for k in range(1, testbed.nodes + 1)] and testbed.nodes >= 4
    assert all(s in ("idle", "mix", "alloc") for s in states.values()), states  # none down/drained
    for k in range(1, testbed.nodes + 1):
        node = _scontrol(testbed, "show", "node", f"n{k}")
        assert "Gres=gpu:h100:8" in node
        assert f"NodeAddr=127.0.0.{k} " in node  # its own loopback address (Ray needs one per node)
        assert f"Port={17000 + k}" in node


def test_config_is_private_to_the_checkout(testbed):
    conf = testbed.slurm_conf.read_text()
    assert str(testbed.slurm_conf).endswith(".testbed/etc/slurm.conf")
    assert f"StateSaveLocation={testbed.root}/state" in conf
    assert f"AuthInfo=socket={testbed.root}/munge/munge.socket" in conf
    assert "/etc/slurm" not in conf and "/var/spool" not in conf
    gres = (testbed.root / "etc" / "gres.conf").read_text()
    assert f"Name=gpu Type=h100 File={testbed.root}/dev/nvidia[0-7]" in gres
    assert sorted(p.name for p in (testbed.root / "dev").iterdir()) == [f"nvidia{i}" for i in range(8)]


def test_up_again_is_a_no_op_on_running_daemons(testbed):
    before = tb_mod._read_pids(testbed)
    tb_mod.up(testbed)
    assert tb_mod._read_pids(testbed) == before
    assert all(tb_mod.status(testbed)["daemons"].values())


def test_up_resumes_a_drained_node(testbed):
    last = f"n{testbed.nodes}"
    _scontrol(testbed, "update", f"nodename={last}", "state=drain", "reason=dispatch-test")
    assert tb_mod.node_states(testbed)[last].startswith(("drain", "drng"))
    tb_mod.up(testbed)
    assert tb_mod.node_states(testbed)[last] in ("idle", "mix", "alloc")
