#!/bin/bash
# Submit the sample job mix to a running dev cluster and record what Slurm prints.
#
#   record.sh prime             run the packable job once, so the shim has its history
#   record.sh submit            submit the mix (prints the job ids it made)
#   record.sh capture LABEL OUT  record every view into OUT/<command>_<LABEL>_<parser>.json|txt
#
# Run it inside the release's root with the cluster's SLURM_CONF in the environment, e.g.
#   eval "$(gpupack devcluster env --state-dir DIR)"  (inside `gpupack root run --slurm V`)
# See README.md in this folder for the mix and for how accounting (slurmdbd) was set up.
set -u
sub() { sbatch --parsable -o /dev/null "$@"; }

PACKME=(-J packme --gres=gpu:1 --wrap 'sleep 45')

prime() {
    sbatch -W -o /dev/null "${PACKME[@]}"                        # completes: its run is the history
}

submit() {
    a=$(sub "${PACKME[@]}")                                       # packed by the shim (history from prime)
    b=$(sub --gpus=1 --wrap 'sleep 900')                          # tres_per_job
    c=$(sub --gpus-per-task=1 -n1 --wrap 'sleep 900')             # tres_per_task
    d=$(sub --gres=gpu:h100:2 --wrap 'sleep 900')                 # typed, whole node
    e=$(sub --exclusive --gres=gpu:1 --wrap 'sleep 900')          # exclusive
    f=$(sub -N2 --gres=gpu:1 --wrap 'sleep 900')                  # two nodes
    g=$(sub -H --gres=gpu:1 --wrap 'sleep 900')                   # held
    h=$(sub --wrap true)                                           # COMPLETED
    i=$(sub --wrap 'exit 3')                                       # FAILED, exit 3
    j=$(sub --gres=shard:4 --wrap 'sleep 900')                    # shards asked directly
    k=$(sub -J 'we"ird %x name' --comment 'user comment' --wrap 'sleep 900')
    l=$(sub --gres=gpu:h100:2 --wrap 'sleep 900')                 # to be cancelled
    m=$(sub --wrap 'sleep 900')                                    # to be requeued
    sleep 8
    scancel "$l"
    scontrol requeue "$m"
    scontrol update JobId="$j" AdminComment='site note'
    scontrol update JobId="$d" ExcNodeList=node3
    sleep 4
    echo "$a $b $c $d $e $f $g $h $i $j $k $l $m"
}

capture() {
    label=$1 out=$2
    parser=$(squeue --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["meta"]["plugin"]["data_parser"].split("/")[-1])')
    squeue --json >"$out/squeue_${label}_${parser}.json"
    scontrol --json show job >"$out/scontrol_${label}_show_job_${parser}.json"
    scontrol --json show node >"$out/scontrol_${label}_show_node_${parser}.json"
    sinfo --json >"$out/sinfo_${label}_${parser}.json"
    scontrol -d -o show job >"$out/scontrol_${label}_show_job_oneliner.txt"
    scontrol -d -o show node >"$out/scontrol_${label}_show_node_oneliner.txt"
    # the export `gpupack simulate --trace sacct:FILE` reads (simulator.workload.SACCT_HELP)
    sacct -P -a -S now-2hours -E now --format=JobID,User,JobName,Submit,Start,End,Elapsed,AllocTRES,ReqTRES,State,TRESUsageInMax,TRESUsageInAve \
        >"$out/sacct_${label}_pipe.txt" 2>/dev/null || rm -f "$out/sacct_${label}_pipe.txt"
    if sacct --json -a -S now-2hours >"$out/sacct_${label}_${parser}.json" 2>"$out/sacct_${label}.stderr.txt"; then
        rm -f "$out/sacct_${label}.stderr.txt"
    else
        echo "sacct exit $?" >&2
        rm -f "$out/sacct_${label}_${parser}.json"
    fi
    echo "recorded $label with $parser into $out"
}

"$@"
