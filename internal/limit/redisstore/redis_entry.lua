-- The entry points (after redis_acts.lua; see redis.lua for the script's
-- contract and its files): one call (decideAt: the short way of quick, or
-- each limit decided, the reservation and the acts), run alone (decide,
-- a script's entry) or in a batch (many); and entry, the library's one
-- function, which picks between them. The last line is replaced by the
-- script's entry (script.go) or the library's registration
-- (functions.go).

-- decideAt is one call: its n keys are those of KEYS after the first k0,
-- and its arguments (as described at the top of redis.lua) those of ARGV
-- after the first a0, up to ARGV[top]. at, when not nil, is Redis's clock
-- already read for it (many, below), which may then get the reply of a
-- call of one limit as the string many answers with. tried says that
-- copied tried to copy the key of a call of one limit, and known whether
-- it exists then (nil: not known).
local function decideAt(KEYS, ARGV, at, k0, a0, n, top, tried, known)
  local now = instant(ARGV, a0, at)
  -- exists is whether the key of a call of one limit exists, when quick
  -- or copied asked.
  local exists, qover
  if tried then
    exists = known
  elseif n == 1 then
    local r
    r, exists, qover = quick(KEYS[k0 + 1], ARGV, a0, top, now)
    if r then
      return r
    end
  end
  overflowed, pruned, joining = 0, false, 0
  for i = 1, n do
    K[i] = KEYS[k0 + i]
  end
  local o = 2
  for i = 1, n do
    local r
    o, r = decideLimit(ARGV, a0, top, n, i, o, now, at, exists, qover)
    if r then
      return r
    end
  end
  local t, allowed = settle(n, now)
  return act(n, now, t, allowed)
end

-- failed returns the reply of a call that raised r: a Redis error (a
-- table with err) or Lua's (a string).
local function failed(r)
  if type(r) ~= 'table' or r.err == nil then
    return redis.error_reply('ERR gateway script: ' .. tostring(r))
  end
  return r
end

-- decide is one call: KEYS and ARGV as described at the top.
local function decide(KEYS, ARGV)
  bind()
  begin()
  TMPL = {}
  local ok, r = pcall(decideAt, KEYS, ARGV, nil, 0, 0, #KEYS, #ARGV)
  flushall()
  if not ok then
    return failed(r)
  end
  return r
end

-- many is several calls in one (a batch of calls to one node, batch.go):
-- ARGV[1] is "*", ARGV[2] the number of calls m, then for each call the
-- number of its keys and of its arguments; or ARGV[1] is "=", ARGV[2] m,
-- and ARGV[3] and ARGV[4] the number of keys and of arguments of every
-- call. Then come the keys of every call, one call's after the other, in
-- KEYS, and their arguments likewise in ARGV. Each call is decided as
-- decide decides it alone, one after the other, on one reading of
-- Redis's clock; the reply holds each call's reply, or its error, in
-- their order: the reply of a call of one limit as one string of its
-- numbers separated by spaces (Redis turns a table of numbers into its
-- reply at several times the cost of a string), of several limits as a
-- table of numbers. A batch in one script is atomic, which is at least
-- what one script per call gives.
local function many(KEYS, ARGV)
  begin()
  TMPL = {}
  local m = num(ARGV[2])
  local out = {}
  local same = ARGV[1] == '='
  local k, a, nk, na = 0, 2 + 2 * m, nil, nil
  if same then
    a, nk, na = 4, num(ARGV[3]), num(ARGV[4])
  end
  local now = clock()
  for c = 1, m do
    if not same then
      nk, na = num(ARGV[1 + 2 * c]), num(ARGV[2 + 2 * c])
    end
    local r, tried, known
    if nk == 1 then
      r, tried, known = copied(KEYS[k + 1], ARGV, a, a + na, now)
    end
    local ok = true
    if not r then
      ok, r = pcall(decideAt, KEYS, ARGV, now, k, a, nk, a + na, tried, known)
    end
    if not ok then
      r = failed(r)
    elseif type(r) == 'string' then
      -- One limit's reply, as a string already.
    elseif r.s then
      r = r.s
    elseif r.err == nil and #r == 10 then
      -- One limit's reply, as a string too.
      r = arg(r[1]) .. ' ' .. arg(r[2]) .. ' ' .. arg(r[3]) .. ' ' .. arg(r[4]) .. ' ' .. arg(r[5]) .. ' ' ..
        arg(r[6]) .. ' ' .. arg(r[7]) .. ' ' .. arg(r[8]) .. ' ' .. arg(r[9]) .. ' ' .. arg(r[10])
    end
    out[c] = r
    k, a = k + nk, a + na
  end
  flushall()
  return out
end

-- entry is the function of the library (functions.go): many calls when
-- ARGV[1] is "*" or "=", else one (decide).
local function entry(KEYS, ARGV)
  bind()
  local mark = ARGV[1]
  if mark == '*' or mark == '=' then
    return many(KEYS, ARGV)
  end
  return decide(KEYS, ARGV)
end
--ENTRY--
