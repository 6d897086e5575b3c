"""Derive 24.11 and 26.05 job_desc tables from the 22.05 recording, where no 24.11/26.05
cluster was at hand to record them (`record.py` on such a cluster replaces the file).

What changes, read from Slurm's source at slurm-24-11-6-1 and slurm-26-05-3-1
(src/common/slurm_opt.c, src/common/proc_args.c, src/plugins/job_submit/lua/job_submit_lua.c):
- the GRES prefix `gres:` becomes `gres/` (tres_per_node/job/socket, mem_per_tres,
  cpus_per_tres; `xfmt_tres(.., "gres/gpu", ..)`), and --gpu-bind's `gpu:` becomes `gres/gpu:`;
- --gpus-per-task is written in the TRES form, `gres/gpu=1` / `gres/gpu:h100=1`
  (`_get_gpu_cnt_and_str`, `slurm_option_update_tres_per_task`), and binds per task unless
  --gpu-bind was given: tres_bind `gres/gpu:per_task:1` (`_implicitly_bind_tres_per_task`);
- power_flags is gone from job_desc (24.11); nothing the shim reads is added.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
TAGS = {"24.11": "slurm-24-11-6-1", "26.05": "slurm-26-05-3-1"}


def derive(job_desc: dict) -> dict:
    out = {k: v for k, v in job_desc.items() if k != "power_flags"}
    for key in ("tres_per_node", "tres_per_job", "tres_per_socket", "mem_per_tres", "cpus_per_tres"):
        if isinstance(out.get(key), str):
            out[key] = out[key].replace("gres:", "gres/")
    task = out.get("tres_per_task")
    if isinstance(task, str):
        match = re.fullmatch(r"gres:gpu(:[^:]+)?:(\d+)", task)
        out["tres_per_task"] = f"gres/gpu{match.group(1) or ''}={match.group(2)}"
        if "tres_bind" not in out:
            out["tres_bind"] = f"gres/gpu:per_task:{match.group(2)}"
    if isinstance(out.get("tres_bind"), str) and out["tres_bind"].startswith("gpu:"):
        out["tres_bind"] = "gres/" + out["tres_bind"]
    return out


def main() -> None:
    base = json.loads((HERE / "slurm-22.05.json").read_text())
    for release, tag in TAGS.items():
        forms = {fid: {**rec, "job_desc": [derive(jd) for jd in rec["job_desc"]]} for fid, rec in base["forms"].items()}
        doc = {"release": release, "source": f"derived from the {base['release']} recording and Slurm's source at {tag}"
               " (tests/data/job_desc/derive.py)", "forms": forms}
        (HERE / f"slurm-{release}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
