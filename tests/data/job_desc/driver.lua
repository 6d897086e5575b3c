--[[
Runs the real job_submit.lua as slurmctld's job_submit/lua plugin does, for tests (no Slurm):
    lua5.1 driver.lua CASES.lua
CASES.lua returns { shim = path, settable = {field = "string"|"number"}, cases = {{uid=, job_desc={}}, ...} }.
The shim is loaded once and kept, as slurmctld keeps its Lua state; each case's job_desc is a
table whose metatable reads and writes the fields as job_submit_lua.c does: unknown fields read
nil; writing a field the release does not know is an error in the log and changes nothing;
luaL_checkstring / luaL_checknumber refuse a value of the wrong type; "" clears a text field;
min_mem_per_node sets pn_min_memory. One JSON line per case on stdout.
--]]
local dir = debug.getinfo(1, "S").source:sub(2):match("^(.*)/[^/]*$")
local json = dofile(dir .. "/jsonenc.lua")
local spec = dofile(arg[1])

local logs
slurm = { SUCCESS = 0, ERROR = -1 }
local function logger(level)
  return function(fmt, ...) logs[#logs + 1] = level .. ": " .. string.format(fmt, ...) end
end
slurm.log_info, slurm.log_error, slurm.log_debug, slurm.log_user = logger("info"), logger("error"), logger("debug"), logger("user")

local function job_desc_of(values, settable)
  local store = {}
  for k, v in pairs(values) do store[k] = v end
  local proxy = setmetatable({}, {
    __index = function(_, k) return store[k] end,
    __newindex = function(_, k, v)
      local kind = settable[k]
      if kind == nil then
        logs[#logs + 1] = "error: _set_job_field: unrecognized field: " .. tostring(k)
      elseif kind == "string" then
        if type(v) ~= "string" and type(v) ~= "number" then error("bad argument #3 (string expected, got " .. type(v) .. ")") end
        v = tostring(v)
        if v == "" then store[k] = nil else store[k] = v end
      else
        local n = tonumber(v)
        if n == nil then error("bad argument #3 (number expected, got " .. type(v) .. ")") end
        store[k] = n
        if k == "min_mem_per_node" then store.pn_min_memory = n end
      end
    end,
  })
  return proxy, store
end

local loaded = assert(loadfile(spec.shim))
loaded()
for _, case in ipairs(spec.cases) do
  logs = {}
  local proxy, store = job_desc_of(case.job_desc, spec.settable)
  local ok, rc = pcall(slurm_job_submit, proxy, {}, case.uid or 0)
  io.write(json.encode({ ok = ok, rc = ok and rc or tostring(rc), job_desc = store, logs = logs }), "\n")
  io.flush()
end
