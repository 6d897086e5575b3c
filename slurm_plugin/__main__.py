from slurm_plugin.cli import main

main(prog_name="gpupack")
