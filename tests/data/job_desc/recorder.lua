--[[
Records the job_desc that slurmctld hands to job_submit/lua, then refuses the job (nothing
runs). Test tooling: `tests/data/job_desc/record.py` installs it in place of the shim on a dev
cluster and puts it back. Each call appends one JSON line to recorded.jsonl next to it.
--]]
local dir = debug.getinfo(1, "S").source:sub(2):match("^(.*)/[^/]*$")
local json = dofile(dir .. "/jsonenc.lua")

-- every readable field of 22.05, 24.11 and 26.05 (job_submit_lua.c _get_job_req_field), but
-- the tables and look-ups (argv, environment, spank_job_env, default_account, default_qos)
local FIELDS = {
  "account", "acctg_freq", "admin_comment", "alloc_node", "argc", "array_inx", "batch_features",
  "begin_time", "bitflags", "boards_per_node", "burst_buffer", "clusters", "comment", "container",
  "contiguous", "core_spec", "cores_per_socket", "cpu_freq_gov", "cpu_freq_max", "cpu_freq_min",
  "cpus_per_task", "cpus_per_tres", "delay_boot", "dependency", "end_time", "exc_nodes", "extra",
  "features", "group_id", "het_job_offset", "immediate", "licenses", "mail_type", "mail_user",
  "max_cpus", "max_nodes", "mcs_label", "mem_per_tres", "min_cpus", "min_mem_per_cpu",
  "min_mem_per_node", "min_nodes", "name", "network", "nice", "ntasks_per_board", "ntasks_per_core",
  "ntasks_per_node", "ntasks_per_socket", "ntasks_per_tres", "num_tasks", "partition", "pn_min_cpus",
  "pn_min_memory", "pn_min_tmp_disk", "power_flags", "prefer", "priority", "qos", "reboot",
  "req_context", "req_nodes", "req_switch", "requeue", "reservation", "script", "segment_size",
  "selinux_context", "shared", "site_factor", "sockets_per_board", "sockets_per_node",
  "spank_job_env_size", "std_err", "std_in", "std_out", "thread_spec", "threads_per_core",
  "time_limit", "time_min", "tres_bind", "tres_freq", "tres_per_job", "tres_per_node",
  "tres_per_socket", "tres_per_task", "user_id", "user_name", "wait4switch", "wckey", "work_dir",
}

function slurm_job_submit(job_desc, part_list, submit_uid)
  local record = {}
  for _, k in ipairs(FIELDS) do
    local ok, v = pcall(function() return job_desc[k] end)
    if ok and v ~= nil then
      if k == "script" then v = "#!/bin/sh\n# recorded script\n" end  -- the test's own text
      record[k] = v
    end
  end
  local f = io.open(dir .. "/recorded.jsonl", "a")
  f:write(json.encode({ submit_uid = submit_uid, job_desc = record }), "\n")
  f:close()
  slurm.log_user("gpupack-recorder: recorded")
  return slurm.ERROR
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end

return slurm.SUCCESS
