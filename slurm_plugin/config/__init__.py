"""gpupack.toml: one loader for the whole file (`whole.py`), its tables read by `toml_file.py`,
re-read by running daemons (`reloading.py`), and its reference page (`reference.py`)."""
