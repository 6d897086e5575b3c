-- A small JSON encoder for the job_desc recorder and the test driver (test tooling only):
-- strings, numbers, booleans and flat or nested tables with string keys.
local M = {}

local function quote(s)
  return '"' .. s:gsub('[%c"\\\128-\255]', function(c)
    local b = c:byte()
    if c == '"' then return '\\"' elseif c == "\\" then return "\\\\" end
    if b >= 128 then return string.format("\\u%04x", b) end  -- bytes as latin-1 code points
    return string.format("\\u%04x", b)
  end) .. '"'
end

local function number(n)
  -- as Python's json module reads them (not strict JSON; test tooling only)
  if n ~= n then return "NaN" end
  if n == math.huge then return "Infinity" elseif n == -math.huge then return "-Infinity" end
  if n == math.floor(n) and math.abs(n) < 2^53 then return string.format("%d", n) end
  return string.format("%.17g", n)
end

function M.encode(v)
  local t = type(v)
  if t == "string" then return quote(v)
  elseif t == "number" then return number(v)
  elseif t == "boolean" then return tostring(v)
  elseif t == "nil" then return "null"
  elseif t == "table" then
    local n = 0
    for _ in pairs(v) do n = n + 1 end
    if n > 0 and n == #v then  -- a list
      local items = {}
      for i = 1, n do items[i] = M.encode(v[i]) end
      return "[" .. table.concat(items, ",") .. "]"
    end
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = tostring(k) end
    table.sort(keys)
    local parts = {}
    for _, k in ipairs(keys) do
      local value = v[k]
      if value == nil then value = v[tonumber(k)] end
      parts[#parts + 1] = quote(k) .. ":" .. M.encode(value)
    end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  return quote("<" .. t .. ">")
end

return M
