"""SIGKILL while a checkpoint is being written: the previous checkpoint stays valid and the run resumes.

A child process trains (local backend, tiny model) and kills itself with SIGKILL in the middle of writing the
checkpoint of update 2: either halfway through copying the backend state into the checkpoint, or just before
``checkpoints/LATEST`` is switched to it. The parent then checks that ``LATEST`` still names update 1, that the
newest complete checkpoint is found (update 1, or the complete update 2 in place before the pointer moved; its
backend state and store load), resumes the run, and checks that no update was lost or repeated.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from reliability_helpers import REPO, tiny_config, use_scripted_policy  # noqa: E402

from tempo_rl.testing.faults import FaultPlan, FaultRates, faulty_build_trainer  # noqa: E402
from tempo_rl.training.checkpoint import latest_checkpoint  # noqa: E402
from tempo_rl.training.run import train_run  # noqa: E402
from tempo_rl.training.store import StateStore  # noqa: E402

CHILD = textwrap.dedent(
    """
    import os, shutil, signal, sys
    from pathlib import Path
    sys.path.insert(0, {helpers!r})
    from reliability_helpers import tiny_config, use_scripted_policy
    from tempo_rl.testing.faults import FaultPlan, FaultRates, faulty_build_trainer
    from tempo_rl.training.run import train_run

    mode, run_dir = sys.argv[1], sys.argv[2]
    TARGET = "update_000002"

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    real_move, real_replace = shutil.move, os.replace

    def move(src, dst, *args, **kwargs):
        if mode == "backend" and (".%s.tmp" % TARGET) in str(dst):
            data = Path(src).read_bytes()
            with open(dst, "wb") as fh:  # half of the backend state reaches the checkpoint, then the kill
                fh.write(data[: len(data) // 2])
                fh.flush()
                os.fsync(fh.fileno())
            die()
        return real_move(src, dst, *args, **kwargs)

    def replace(src, dst, *args, **kwargs):
        if mode == "latest" and str(dst).endswith("LATEST") and Path(src).read_text().strip() == TARGET:
            die()  # the new checkpoint directory is in place; the pointer is not switched yet
        return real_replace(src, dst, *args, **kwargs)

    shutil.move, os.replace = move, replace
    config = tiny_config(tempo={{"warmup_updates": 1, "td_updates": 2}})
    with faulty_build_trainer(FaultPlan(FaultRates()), before=use_scripted_policy):
        train_run(run_dir, config, console=False)
    print("NOT KILLED")
    """
)


def _steps(run_dir: Path) -> list[int]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["step"] for line in lines if line.strip()]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["backend", "latest"])
def test_sigkill_while_writing_a_checkpoint_keeps_the_previous_one_and_resume_works(
    tmp_path: Path, mode: str
) -> None:
    run_dir = tmp_path / "run"
    script = CHILD.format(helpers=str(Path(__file__).parent))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [sys.executable, "-c", script, mode, str(run_dir)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr

    assert (run_dir / "checkpoints" / "LATEST").read_text().strip() == "update_000001"  # never switched
    ckpt = latest_checkpoint(run_dir)
    # killed mid-copy: update 2 never became a checkpoint, update 1 is the newest; killed before the pointer
    # moved: update 2 is complete (renamed into place after every file was fsync'ed) and verifies, so the
    # directory scan resumes from it
    expected = 1 if mode == "backend" else 2
    assert ckpt is not None and ckpt.update == expected, "the newest complete checkpoint must be found"
    assert ckpt.backend_state is not None
    state = torch.load(ckpt.backend_state, weights_only=True)  # the checkpoint is intact
    assert state["step"] == expected
    assert ckpt.store_path is not None
    StateStore(ckpt.store_path).close()
    partial = run_dir / "checkpoints" / (".update_000002.tmp" if mode == "backend" else "update_000002")
    assert partial.exists()  # the kill really happened mid-write

    with faulty_build_trainer(FaultPlan(FaultRates()), before=use_scripted_policy) as built:
        summary = train_run(run_dir, tiny_config(), resume=True, console=False)
    assert summary["updates_done"] == 3
    assert _steps(run_dir) == [1, 2, 3], "an update was lost or repeated"
    final = latest_checkpoint(run_dir)
    assert final is not None and final.update == 3
    assert built[0].state.policy_version == 3  # one optimizer step per update, none applied twice
    assert not (run_dir / "checkpoints" / ".update_000002.tmp").exists()
