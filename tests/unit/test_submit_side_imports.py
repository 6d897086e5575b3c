"""The submit side keeps pandas out (slurm_plugin.startup.keep_out_of_submit_side): sqlite-utils
loads it whenever it is installed, the submit side never uses it, and its store still works."""
from __future__ import annotations

import subprocess
import sys
import textwrap


def run(code: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(tmp_path)], capture_output=True,
                          text=True, timeout=120)


def test_the_submit_side_loads_no_pandas_and_its_store_works(tmp_path):
    done = run("""
        import sys
        from pathlib import Path
        from slurm_plugin.startup import keep_out_of_submit_side
        assert keep_out_of_submit_side() == ["pandas"]
        import slurm_plugin.helper.daemon
        from store.db import Store
        store = Store(Path(sys.argv[1]) / "db.sqlite")
        store.log_event("steer", "a detail", 7, excluded=["node1"])
        (event,) = store.events(job_id=7)
        assert event.detail == "a detail", event
        assert sys.modules["pandas"] is None
        print("ok")
    """, tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_without_it_sqlite_utils_loads_pandas_where_installed(tmp_path):
    """What the mark is for: were pandas not installed, there would be nothing to keep out."""
    done = run("""
        import importlib.util, sys
        import store.db
        print(importlib.util.find_spec("pandas") is not None, "pandas" in sys.modules)
    """, tmp_path)
    installed, loaded = done.stdout.split()
    assert done.returncode == 0 and loaded == installed, done.stderr


def test_a_module_already_loaded_is_left_as_it_is(tmp_path):
    done = run("""
        import pandas
        from slurm_plugin.startup import keep_out_of_submit_side
        import sys
        assert keep_out_of_submit_side() == [] and sys.modules["pandas"] is pandas
        print("ok")
    """, tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr  # pandas: statsmodels' own need
