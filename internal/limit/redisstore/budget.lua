-- The key budget of the Redis store (redis_budget.go), for the decision
-- (redis.lua): a request whose counter does not exist yet and that has an
-- overflow counter is counted against that instead when the membership
-- set of its slot holds its budget of live keys.
--
-- The budget's arguments come last in ARGV, after the decision's, so that
-- the decision never sees them: for each budgeted limit, its index in KEYS
-- and the Redis key of its overflow counter; then the membership set, the
-- budget, and the number of budgeted limits (ARGV[#ARGV], 0 for none).
-- The set and the overflow counters are in the slot of KEYS.
--
-- The set's members are the counters of new callers; a member's score is
-- an instant (ms, Redis's clock) at or before which its counter may have
-- expired: it is looked at again then (PTTL) and dropped once the counter
-- is gone. A counter joins the set once the decision has written it, with
-- the expiry it was given (join, redis.lua): a counter the decision did
-- not create (a denied request) never joins, and members are due in the
-- order their counters expire, not the order they joined. Pruning runs
-- only when the set is full. The budget costs
-- nothing for a counter that exists: the decision learns that from the
-- fields it reads anyway.

-- The functions the scripts call, as locals of the library (upvalues),
-- which costs less than looking up a global on every call (math.floor
-- is two lookups). This file comes first in the script (script.go), so
-- the decision's script and the algorithms see them too. A library
-- cannot reach the globals while it is loaded: every call sets them
-- first (bind, called by decide and entry in redis.lua).
local rcall, floor, ceil, max, min, abs, tonumber, tostring, unpack, type

local function bind()
  rcall, floor, ceil, max, min, abs = redis.call, math.floor, math.ceil, math.max, math.min, math.abs
  tonumber, tostring, unpack, type = _G.tonumber, _G.tostring, _G.unpack, _G.type
end

-- NUMOF maps the strings of numbers that calls sent as arguments (the
-- counts and indexes of a batch, budgets) to their numbers, nnumof of
-- them: tonumber reads a string with strtod every time.
local NUMOF, nnumof = {}, 0

-- num returns the number that s, a script argument, spells (tonumber).
-- It is here, ahead of the decision's script (redis.lua), which uses it
-- too.
local function num(s)
  local x = NUMOF[s]
  if x then
    return x
  end
  x = tonumber(s)
  if nnumof >= 1024 then
    NUMOF, nnumof = {}, 0
  end
  NUMOF[s] = x
  nnumof = nnumof + 1
  return x
end

-- budget returns the budget's arguments of a call for limit i: the set,
-- its budget and limit i's overflow counter, or nil when i has none. It is read
-- only for a counter that does not exist yet. The call's arguments end
-- at ARGV[top].
local function budget(ARGV, top, i)
  local m = num(ARGV[top])
  local base = top - 3 - 2 * m
  for j = 1, m do
    if num(ARGV[base + 2 * j - 1]) == i then
      return ARGV[top - 2], num(ARGV[top - 1]), ARGV[base + 2 * j]
    end
  end
  return nil
end

-- prune looks at up to 32 members of set that are due at ms, drops
-- those whose counter is gone and moves the others to their counter's
-- expiry.
local function prune(set, ms)
  local due = rcall('ZRANGEBYSCORE', set, '-inf', ms, 'LIMIT', 0, 32)
  for _, k in ipairs(due) do
    local left = rcall('PTTL', k)
    if left == -2 then
      rcall('ZREM', set, k)
    elseif left == -1 then
      -- Counters always expire; look again in a minute.
      rcall('ZADD', set, ms + 60000, k)
    else
      rcall('ZADD', set, ms + left, k)
    end
  end
end

-- room reports whether the counter key may be created in set, of budget
-- cap, at ms, when joining counters of the call are about to join it, and
-- whether the set has been pruned in this call: pruned says whether it
-- had been.
local function room(set, cap, key, ms, pruned, joining)
  if rcall('ZCARD', set) + joining < cap or rcall('ZSCORE', set, key) then
    return true, pruned
  end
  if pruned then
    return false, true
  end
  prune(set, ms)
  return rcall('ZCARD', set) + joining < cap, true
end

-- newcaller reports whether key, a counter that does not exist yet, may
-- be created in set (of budget cap), where joining counters of the call
-- are about to join: it returns nil and the instant (ms, Redis's clock)
-- from which the counter's expiry counts, for it to join the set once
-- written (join, redis.lua); or over, the overflow counter to count on
-- instead, when the set holds its budget. It also returns whether the set
-- has been pruned in this call (a call's limits share one set: pruned
-- says whether an earlier limit pruned it). now is the decision's instant
-- (µs); with fixed (a test's fixed instant) the set is on Redis's clock
-- all the same, as the counters' expiry is.
local function newcaller(set, cap, over, pruned, key, now, fixed, joining)
  local ms
  if fixed then
    local t = rcall('TIME')
    ms = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
  else
    ms = floor(now / 1000)
  end
  local ok
  ok, pruned = room(set, cap, key, ms, pruned, joining)
  if ok then
    return nil, pruned, ms
  end
  return over, pruned, ms
end
