-- Replays pre-signed requests: each wrk thread takes every Nth line of the file, so no two
-- threads send the same nonce.  Line format (tab separated): METHOD PATH HEADERS BODY, where
-- HEADERS is "name: value" pairs joined by "|" and BODY may be empty.
local threads = {}
local counter = 0

function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

local function split(s, sep)
  local out = {}
  for piece in (s .. sep):gmatch("(.-)" .. sep:gsub("%p", "%%%0")) do
    table.insert(out, piece)
  end
  return out
end

function init(args)
  local path = args[1]
  local nthreads = tonumber(args[2])
  reqs = {}
  local n = 0
  for line in io.lines(path) do
    if n % nthreads == id then
      local f = split(line, "\t")
      -- HTTP/1.1 requires Host: Go servers (OpenBao) close the connection without it.
      local headers = { Host = wrk.headers["Host"] }
      if f[3] ~= "" then
        for _, h in ipairs(split(f[3], "|")) do
          local k, v = h:match("^(.-): (.*)$")
          headers[k] = v
        end
      end
      local body = f[4]
      if body == "" then body = nil end
      table.insert(reqs, wrk.format(f[1], f[2], headers, body))
    end
    n = n + 1
  end
  idx = 0
end

function request()
  idx = idx + 1
  if idx > #reqs then idx = 1 end
  return reqs[idx]
end
