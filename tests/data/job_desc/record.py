"""Record the job_desc tables slurmctld gives job_submit/lua for every request form.

Run as root with a dev cluster's environment (SLURM_CONF of `gpupack devcluster up`, or of the
integration tests' cluster), on the release to record:

    python3 tests/data/job_desc/record.py /var/lib/gpupack/devcluster

It puts recorder.lua in place of the cluster's job_submit.lua (slurmctld reloads the script
when it changes), submits every form of `tests/submit_forms.py` (the recorder refuses each,
so nothing runs), puts the shim back, and writes `slurm-<major.minor>.json` next to this file:
{form id: {"job_desc": [one table per job component], "client": what the command said}}.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from submit_forms import forms  # noqa: E402
from slurm_plugin.devcluster.manager import slurm_release  # noqa: E402

SCRIPT = b"#!/bin/sh\ntrue\n"


def dumps(doc: dict) -> str:
    """The recording as JSON, one form to a line (diffs stay readable)."""
    forms = ",\n".join(f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(doc["forms"].items()))
    head = {k: v for k, v in doc.items() if k != "forms"}
    return json.dumps(head, sort_keys=True)[:-1] + ', "forms": {\n' + forms + "\n}}\n"


def main(state_dir: str) -> None:
    etc = Path(state_dir) / "etc"
    shim = etc / "job_submit.lua"
    kept = shim.read_bytes()
    out = etc / "recorded.jsonl"
    out.write_bytes(b"")
    os.chmod(out, 0o666)  # slurmctld runs as the SlurmUser
    for name in ("jsonenc.lua", "recorder.lua"):
        shutil.copy(HERE / name, etc / name)
    shutil.copy(HERE / "recorder.lua", shim)
    os.chmod(etc, 0o755)
    recorded: dict[str, dict] = {}
    try:
        time.sleep(1.1)  # the reload compares mtimes in seconds
        for form in forms():
            done = out.read_text().splitlines() if out.exists() else []
            result = subprocess.run(form.command(), input=SCRIPT if form.launcher.startswith("sbatch") else None,
                                    capture_output=True, timeout=60)
            lines = out.read_text().splitlines()[len(done):] if out.exists() else []
            recorded[form.id] = {
                "command": form.command(),
                "job_desc": [json.loads(line)["job_desc"] for line in lines],
                "client": (result.stderr.decode(errors="replace").strip().splitlines() or [""])[-1],
            }
    finally:
        shim.write_bytes(kept)
        os.utime(shim)
    major, minor = slurm_release()[:2]
    release = f"{major}.{minor:02d}"
    path = HERE / f"slurm-{release}.json"
    doc = {"release": f"{release}.{slurm_release()[2]}", "source": "recorded", "forms": recorded}
    path.write_text(dumps(doc))
    print(f"{len(recorded)} forms -> {path}")


if __name__ == "__main__":
    main(sys.argv[1])
