--[[
gpupack submit shim for Slurm's job_submit/lua plugin (Lua 5.1, Slurm 22.05 and later).

Asks the gpupack controller helper, over a local Unix socket, whether a job that asks for
one whole GPU can share one, and applies the answer: AdminComment always (advise and
enforce), the request rewritten to gres shards (enforce only).

It fails open: a missing, slow or confused helper, an unknown field or any Lua error lets
the job through unchanged, within a strict time budget, and says why in slurmctld's log.
It never returns an error to slurmctld and never evaluates or opens anything a user wrote.

Settings come from gpupack_shim.conf next to this file (key=value):
  socket=/path/to/helper.sock   timeout_ms=50   kill_switch=/path/to/file
--]]

local CONF_REFRESH_S = 10
local CLEARABLE = { tres_per_job = true, tres_per_task = true }
local FIELDS = {
  "name", "script", "tres_per_node", "tres_per_job", "tres_per_task",
  "min_nodes", "max_nodes", "num_tasks", "shared", "partition", "admin_comment", "user_name",
  "req_nodes",
}

local conf = { socket = "/run/gpupack/helper.sock", timeout_ms = 50, kill_switch = "/etc/slurm/gpupack.disable" }
local conf_loaded_at = -1
local luasocket, unix_ctor, load_error
-- slurmctld keeps this Lua state between submissions (and calls it under a lock, one job at
-- a time), so the connection to the helper is kept too: no connect and accept per job.
-- After any failure it is closed (a late answer must never be read as the next job's).
local conn, conn_path

local function log_info(fmt, ...) slurm.log_info("gpupack: " .. fmt, ...) end

local function here()
  local src = debug.getinfo(1, "S").source
  return (src:sub(1, 1) == "@" and src:sub(2):match("^(.*)/[^/]*$")) or "."
end

local function load_conf()
  local now = os.time()
  if conf_loaded_at >= 0 and now - conf_loaded_at < CONF_REFRESH_S then return end
  conf_loaded_at = now
  local f = io.open(here() .. "/gpupack_shim.conf", "r")
  if not f then return end
  for line in f:lines() do
    local k, v = line:match("^%s*([%w_]+)%s*=%s*(.-)%s*$")
    if k == "timeout_ms" then conf.timeout_ms = tonumber(v) or conf.timeout_ms
    elseif k == "socket" or k == "kill_switch" then conf[k] = v end
  end
  f:close()
  if conn and conf.socket ~= conn_path then conn:close() conn = nil end
end

local function load_socket()
  if luasocket or load_error then return luasocket end
  local ok, s = pcall(require, "socket")
  local ok2, u = pcall(require, "socket.unix")
  if ok and ok2 then
    luasocket = s
    unix_ctor = (type(u) == "table" and u.stream) or u
  else
    load_error = tostring(ok and u or s)
  end
  return luasocket
end

local function file_exists(path)
  local f = io.open(path, "r")
  if f then f:close() return true end
  return false
end

local function wants_gpu(job_desc)
  for _, k in ipairs({ "tres_per_node", "tres_per_job", "tres_per_task" }) do
    local v = job_desc[k]
    if type(v) == "string" and v:find("gpu", 1, true) then return true end
  end
  return false
end

local function encode(job_desc, submit_uid)
  local parts = { "GPUPACK/1\n" }
  local function add(key, value)
    if value == nil then return end
    value = tostring(value)
    parts[#parts + 1] = key .. " " .. #value .. "\n" .. value .. "\n"
  end
  add("op", "submit")
  add("uid", submit_uid)
  for _, k in ipairs(FIELDS) do add(k, job_desc[k]) end
  parts[#parts + 1] = "END\n"
  return table.concat(parts)
end

-- One exchange on connection `c`: the whole request out, one answer line back, by `deadline`.
local function exchange(c, request, deadline)
  local i = 1
  while i <= #request do
    local left = deadline - luasocket.gettime()
    if left <= 0 then return nil, "helper too slow (send)" end
    c:settimeout(left)
    local last, serr, partial = c:send(request, i)
    if last then i = last + 1
    elseif partial and partial >= i then i = partial + 1
    else return nil, "send failed (" .. tostring(serr) .. ")" end
  end
  local left = deadline - luasocket.gettime()
  if left <= 0 then return nil, "helper too slow (answer)" end
  c:settimeout(left)
  local line, rerr = c:receive("*l")
  if not line then return nil, "no answer (" .. tostring(rerr) .. ")" end
  return line
end

local function ask_helper(request)
  local deadline = luasocket.gettime() + conf.timeout_ms / 1000
  for attempt = 1, 2 do
    local reused = conn ~= nil
    if not reused then
      local c = unix_ctor()
      if not c then return nil, "cannot create a unix socket" end
      c:settimeout(math.max(deadline - luasocket.gettime(), 0))
      local ok, err = c:connect(conf.socket)
      if not ok then c:close() return nil, "helper unreachable (" .. tostring(err) .. ")" end
      conn, conn_path = c, conf.socket
    end
    local line, err = exchange(conn, request, deadline)
    if line then
      local answer = {}
      for pair in (line .. "\t"):gmatch("([^\t]*)\t") do
        local k, v = pair:match("^([%w_]+)=(.*)$")
        if k then answer[k] = v end
      end
      return answer
    end
    conn:close()
    conn = nil
    -- a kept connection the helper closed (it restarted) gets one fresh try, in the same budget
    if not reused or err:find("too slow", 1, true) or err:find("timeout", 1, true) then
      return nil, err
    end
  end
  return nil, "helper closed the connection twice"
end

local function apply(job_desc, answer)
  if answer.status ~= "ok" then return "not applied (" .. tostring(answer.reason) .. ")" end
  local applied = {}
  if answer.admin_comment and answer.admin_comment ~= "" then
    job_desc.admin_comment = answer.admin_comment
    applied[#applied + 1] = "comment"
  end
  if answer.rewrite and answer.rewrite:match("^gres[:/]shard:%d+$") then
    local exclude = answer.exclude or ""
    if exclude ~= "" and not exclude:match("^[%w%-%._,%[%]]+$") then
      return "refused the exclude list; request left as is"
    end
    if answer.clear and answer.clear ~= "" then
      if not CLEARABLE[answer.clear] then return "refused to clear " .. answer.clear end
      job_desc[answer.clear] = ""
    end
    job_desc.tres_per_node = answer.rewrite
    applied[#applied + 1] = "rewrite=" .. answer.rewrite
    -- pair avoidance: node names only (a hostlist), added to what the user excluded
    if exclude ~= "" then
      local mine = job_desc.exc_nodes
      if type(mine) == "string" and mine ~= "" then
        job_desc.exc_nodes = mine .. "," .. exclude
      else
        job_desc.exc_nodes = exclude
      end
      applied[#applied + 1] = "exclude=" .. exclude
    end
  end
  return (#applied > 0) and table.concat(applied, ",") or "nothing"
end

local function submit(job_desc, submit_uid)
  load_conf()
  if not wants_gpu(job_desc) then return end
  if file_exists(conf.kill_switch) then
    log_info("kill switch %s present: job from uid %s passed through", conf.kill_switch, tostring(submit_uid))
    return
  end
  if not load_socket() then
    log_info("luasocket unavailable (%s): job passed through", tostring(load_error))
    return
  end
  local started = luasocket.gettime()
  local answer, err = ask_helper(encode(job_desc, submit_uid))
  local elapsed_ms = (luasocket.gettime() - started) * 1000
  if not answer then
    log_info("uid=%s passed through: %s elapsed_ms=%.3f", tostring(submit_uid), err, elapsed_ms)
    return
  end
  local snapshot = { admin_comment = job_desc.admin_comment, tres_per_node = job_desc.tres_per_node,
                     exc_nodes = job_desc.exc_nodes }
  local ok, result = pcall(apply, job_desc, answer)
  if not ok then
    -- put back what a half-applied answer may have changed
    pcall(function()
      job_desc.admin_comment = snapshot.admin_comment or ""
      job_desc.tres_per_node = snapshot.tres_per_node or ""
      job_desc.exc_nodes = snapshot.exc_nodes or ""
    end)
    result = "apply failed: " .. tostring(result)
  end
  log_info("uid=%s verdict=%s reason=%s mode=%s fp=%s applied=%s elapsed_ms=%.3f",
    tostring(submit_uid), tostring(answer.verdict), tostring(answer.reason), tostring(answer.mode),
    tostring(answer.fp), result, (luasocket.gettime() - started) * 1000)
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local ok, err = pcall(submit, job_desc, submit_uid)
  if not ok then
    slurm.log_info("gpupack: shim error, job passed through: %s", tostring(err))
  end
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end

return slurm.SUCCESS
