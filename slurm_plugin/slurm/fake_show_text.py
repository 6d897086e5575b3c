"""The fake's `scontrol -d show job ID`, laid out as 22.05 prints one job
(tests/data/slurm/scontrol_22.05_show_job_detail_*.txt): the fields the fake keeps, a user's
name and comment as given (newlines too), and a running job's allocation lines, one a node."""
from __future__ import annotations

from slurm_plugin.slurm.fake_formatted import _time
from slurm_plugin.slurm.fake_records import FakeJob
from slurm_plugin.slurm.gres import expand_hostlist


def show_job_detail(job: FakeJob) -> str:
    hosts = expand_hostlist(job.nodes) if job.nodes else []
    lines = [f"JobId={job.job_id} JobName={job.name}",
             f"   UserId={job.user}(0) GroupId={job.user}(0) MCS_label=N/A",
             f"   Priority={job.priority} Nice={job.nice} Account=(null) QOS={job.qos or '(null)'}",
             f"   JobState={job.state} Reason={job.state_reason if job.state == 'PENDING' else 'None'} Dependency=(null)",
             f"   Requeue={int(job.requeue)} Restarts={job.restart_cnt} BatchFlag=1 Reboot=0 ExitCode={job.exit_code}:0",
             f"   SubmitTime={_time(job.submit_time)} EligibleTime={_time(job.submit_time)}",
             f"   StartTime={_time(job.start_time)} EndTime=Unknown Deadline=N/A",
             f"   Partition={job.partition} AllocNode:Sid=localhost:1",
             f"   ReqNodeList={job.required_nodes or '(null)'} ExcNodeList={job.excluded_nodes or '(null)'}",
             f"   NodeList={job.nodes or '(null)'}",
             f"   BatchHost={job.batch_host or (hosts[0] if hosts else '(null)')}",
             f"   NumNodes={max(len(hosts), 1)} NumCPUs={max(len(hosts), 1)} NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:*",
             "   TRES=cpu=1,node=1,billing=1",
             "   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*"]
    if job.state == "RUNNING" and job.gres_detail:
        lines.append(f"   JOB_GRES={job.tres_per_node.removeprefix('gres:') or '(null)'}")
        lines += [f"     Nodes={host} CPU_IDs=0 Mem=0 GRES={entry}" for host, entry in zip(hosts, job.gres_detail)]
    lines += ["   MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0",
              f"   Features={job.features or '(null)'} DelayBoot=00:00:00",
              f"   OverSubscribe={'NO' if job.exclusive else 'OK'} Contiguous=0 Licenses={job.licenses or '(null)'} "
              "Network=(null)",
              "   Command=(null)",
              "   WorkDir=/tmp"]
    if job.admin_comment:
        lines.append(f"   AdminComment={job.admin_comment} ")
    if job.comment:
        lines.append(f"   Comment={job.comment} ")
    lines += ["   StdErr=/dev/null", "   StdIn=/dev/null", "   StdOut=/dev/null", "   Power=",
              f"   TresPerNode={job.tres_per_node or '(null)'}", "   ", ""]
    return "\n".join(lines)
