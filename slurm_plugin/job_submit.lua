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
A number out of its range (timeout_ms: 1 to 1000; not inf, nan or negative) is an error in
slurmctld's log, and the default is kept.

What it may change, and only as the helper says: tres_per_node (to 1 to MAX_SHARDS gres
shards), the fields of CLEARABLE (cleared), the numbers of SETTABLE (whole numbers in range),
exc_nodes (a hostlist added) and admin_comment. The request forms: docs/request-forms.md.
--]]

local CONF_REFRESH_S = 10
local DEFAULT_TIMEOUT_MS = 50
local MAX_TIMEOUT_MS = 1000  -- slurmctld waits for the answer holding its job write lock
local MAX_SHARDS = 65535  -- shards of one GPU in a rewrite (0 would take the job's GPU away)
local CLEARABLE = { tres_per_job = true, tres_per_task = true, mem_per_tres = true, cpus_per_tres = true,
                   tres_bind = true }
-- numbers the helper may set, with their ranges (MB; CPUs; CPUs, a 16-bit field below NO_VAL16)
local SETTABLE = { min_mem_per_node = { 1, 2 ^ 40 }, min_cpus = { 1, 2 ^ 20 }, cpus_per_task = { 1, 65533 } }
local FIELDS = {
  "name", "script", "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket",
  "min_nodes", "max_nodes", "num_tasks", "ntasks_per_node", "shared", "partition", "admin_comment",
  "user_name", "req_nodes", "mem_per_tres", "cpus_per_tres", "tres_freq", "requeue",
  "het_job_offset", "min_mem_per_node", "min_mem_per_cpu", "cpus_per_task", "min_cpus", "tres_bind",
}
local GPU_FIELDS = { "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket" }

local conf = { socket = "/run/gpupack/helper.sock", timeout_ms = DEFAULT_TIMEOUT_MS,
               kill_switch = "/etc/slurm/gpupack.disable" }
local conf_loaded_at = -1
local luasocket, unix_ctor, load_error
-- slurmctld keeps this Lua state between submissions (and calls it under a lock, one job at
-- a time), so the connection to the helper is kept too: no connect and accept per job.
-- After any failure it is closed (a late answer must never be read as the next job's).
local conn, conn_path

local function log_info(fmt, ...) slurm.log_info("gpupack: " .. fmt, ...) end
local function log_error(fmt, ...) slurm.log_error("gpupack: " .. fmt, ...) end

-- `text` as a number within [low, high], or nil and why not (nan, inf and huge values are out)
local function bounded(text, low, high)
  local n = tonumber(text)
  if n == nil then return nil, "is not a number" end
  if n ~= n or n < low or n > high then return nil, "is out of range [" .. low .. ", " .. high .. "]" end
  return n
end

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
    if k == "timeout_ms" then
      local n, why = bounded(v, 1, MAX_TIMEOUT_MS)
      if n then conf.timeout_ms = n
      else log_error("gpupack_shim.conf: timeout_ms=%s %s; keeping %s", v, why, tostring(conf.timeout_ms)) end
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
  for _, k in ipairs(GPU_FIELDS) do
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
  -- salloc and srun allocations have no script (and Slurm never requeues them)
  add("batch", job_desc.script ~= nil and "1" or "0")
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

-- What the answer asks to change, checked in full before anything is changed; nil and why
-- when any part of it is not what the helper may ask.
local function plan(answer)
  local p = { clear = {}, set = {} }
  if not (answer.rewrite and answer.rewrite ~= "") then return p end
  local count = answer.rewrite:match("^gres[:/]shard:(%d+)$") or answer.rewrite:match("^gres[:/]shard:[%w_][%w_%.%-]*:(%d+)$")
  if not (count and bounded(count, 1, MAX_SHARDS)) then
    return nil, "refused the rewrite " .. answer.rewrite
  end
  p.rewrite = answer.rewrite
  p.exclude = answer.exclude or ""
  if p.exclude ~= "" and not p.exclude:match("^[%w%-%._,%[%]]+$") then
    return nil, "refused the exclude list"
  end
  for field in (answer.clear or ""):gmatch("[^,]+") do
    if not CLEARABLE[field] then return nil, "refused to clear " .. field end
    p.clear[#p.clear + 1] = field
  end
  for field, range in pairs(SETTABLE) do
    local text = answer[field]
    if text and text ~= "" then
      local n = text:match("^%d+$") and bounded(text, range[1], range[2])
      if not n then return nil, "refused " .. field .. "=" .. text end
      p.set[field] = n
    end
  end
  return p
end

local function apply(job_desc, answer)
  if answer.status ~= "ok" then return "not applied (" .. tostring(answer.reason) .. ")" end
  local p, why = plan(answer)
  if not p then return why .. "; request left as is" end
  local applied = {}
  if answer.admin_comment and answer.admin_comment ~= "" then
    job_desc.admin_comment = answer.admin_comment
    applied[#applied + 1] = "comment"
  end
  if p.rewrite then
    for _, field in ipairs(p.clear) do job_desc[field] = "" end
    job_desc.tres_per_node = p.rewrite
    applied[#applied + 1] = "rewrite=" .. p.rewrite
    for field, n in pairs(p.set) do
      job_desc[field] = n
      applied[#applied + 1] = field .. "=" .. string.format("%d", n)
    end
    -- pair avoidance: node names only (a hostlist), added to what the user excluded
    if p.exclude ~= "" then
      local mine = job_desc.exc_nodes
      if type(mine) == "string" and mine ~= "" then
        job_desc.exc_nodes = mine .. "," .. p.exclude
      else
        job_desc.exc_nodes = p.exclude
      end
      applied[#applied + 1] = "exclude=" .. p.exclude
    end
  end
  return (#applied > 0) and table.concat(applied, ",") or "nothing"
end

local RESTORABLE = { "admin_comment", "tres_per_node", "exc_nodes", "tres_per_job", "tres_per_task",
                     "mem_per_tres", "cpus_per_tres", "tres_bind" }

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
  local request = encode(job_desc, submit_uid)
  local asked = luasocket.gettime()
  local answer, err = ask_helper(request)
  local answered = luasocket.gettime()
  -- ask_ms: the exchange with the helper (its decision and the socket); the rest of
  -- elapsed_ms is the shim's own Lua work (encoding the request, checking and applying the answer)
  local ask_ms = (answered - asked) * 1000
  local elapsed_ms = (answered - started) * 1000
  if not answer then
    log_info("uid=%s passed through: %s ask_ms=%.3f elapsed_ms=%.3f", tostring(submit_uid), err, ask_ms, elapsed_ms)
    return
  end
  local snapshot = {}
  for _, k in ipairs(RESTORABLE) do snapshot[k] = job_desc[k] end
  local ok, result = pcall(apply, job_desc, answer)
  if not ok then
    -- put back the text fields a half-applied answer may have changed (the answer was checked
    -- in full first: only slurmctld itself refusing an assignment gets here)
    for _, k in ipairs(RESTORABLE) do pcall(function() job_desc[k] = snapshot[k] or "" end) end
    result = "apply failed: " .. tostring(result)
  end
  log_info("uid=%s verdict=%s reason=%s mode=%s fp=%s ask_ms=%.3f applied=%s elapsed_ms=%.3f",
    tostring(submit_uid), tostring(answer.verdict), tostring(answer.reason), tostring(answer.mode),
    tostring(answer.fp), ask_ms, result, (luasocket.gettime() - started) * 1000)
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
