-- The key budget of the Redis store (budget.go), for the decision
-- (redis.lua): a request whose counter does not exist yet and that has an
-- overflow counter is counted against that instead when the membership
-- set of its slot holds its budget of live keys.
--
-- The budget's arguments come last in ARGV, after the decision's, so that
-- the decision never sees them (see budget, below). The set and the
-- overflow counters are in the slot of KEYS.
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
-- first (bind, called by decide and entry in redis_entry.lua).
local rcall, floor, ceil, max, min, abs, tonumber, tostring, unpack, type

local function bind()
  rcall, floor, ceil, max, min, abs = redis.call, math.floor, math.ceil, math.max, math.min, math.abs
  tonumber, tostring, unpack, type = _G.tonumber, _G.tostring, _G.unpack, _G.type
end

-- NUMOF maps the strings of numbers that calls sent as arguments (the
-- counts and indexes of a batch, budgets) or read from counters (counts,
-- bucket numbers, expiry instants, which many counters share) to their
-- numbers, nnumof of them: tonumber reads a string with strtod every
-- time, at several times the cost of a table lookup.
local NUMOF, nnumof = {}, 0

-- num returns the number that s, a script argument or a field's value,
-- spells (tonumber). It is here, ahead of the decision's script
-- (redis.lua) and the algorithms', which use it too.
local function num(s)
  if s ~= s then
    return nil -- NaN, which no table can be indexed by
  end
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

-- BUDGETS maps the budget's arguments (below) to what they spell,
-- nbudgets of them: a rule's are the same string on every call.
local BUDGETS, nbudgets = {}, 0

-- field returns the field of s at pos, "length value" (the value has
-- that many bytes, any bytes), and the position after it and its space.
local function field(s, pos)
  local l, at = string.match(s, '^(%d+) ()', pos)
  if not l then
    return nil, pos
  end
  l = tonumber(l)
  if at + l - 1 > #s then
    return nil, pos
  end
  return string.sub(s, at, at + l - 1), at + l + 1
end

-- parsebudget returns s, a call's budget argument, as {cap, set, over},
-- over mapping the index of each limit that has a budget to its
-- overflow counter; nil when s is malformed.
local function parsebudget(s)
  local m, cap, pos = string.match(s, '^(%d+) (%d+) ()')
  if not m then
    return nil
  end
  local b = { cap = tonumber(cap), over = {} }
  b.set, pos = field(s, pos)
  if not b.set then
    return nil
  end
  for _ = 1, tonumber(m) do
    local i, at = string.match(s, '^(%d+) ()', pos)
    if not i then
      return nil
    end
    local over
    over, pos = field(s, at)
    if not over then
      return nil
    end
    b.over[tonumber(i)] = over
  end
  if pos <= #s then
    return nil
  end
  return b
end

-- budget returns the budget's arguments of a call for limit i: the set,
-- its budget and limit i's overflow counter, or nil when i has none. It
-- is read only for a counter that does not exist yet. The call's
-- arguments end at ARGV[top], its budget argument: "0" when no limit
-- has a budget, else "m budget n set" and, for each of the m limits
-- that has one, " i n over", with the Redis key of its overflow counter;
-- n is the length of what follows it (budgetArgs, budget.go).
local function budget(ARGV, top, i)
  local s = ARGV[top]
  if s == '0' then
    return nil
  end
  local b = BUDGETS[s]
  if not b then
    b = parsebudget(s)
    if not b then
      error({ err = 'ERR gateway script: bad budget argument ' .. s })
    end
    if nbudgets >= 4096 then
      BUDGETS, nbudgets = {}, 0
    end
    BUDGETS[s] = b
    nbudgets = nbudgets + 1
  end
  local over = b.over[i]
  if over then
    return b.set, b.cap, over
  end
  return nil
end

-- CARD maps each budget set that the script call (one FCALL or EVAL,
-- which no other client's command interleaves) has looked at to its
-- size, counting the members that joined it in this script call, and
-- PEND to those members, in ZADD's order (score, member, ...), until
-- they are added (flush); PSETS lists the sets of PEND. A script call
-- starts them afresh (begin): one library serves every database of a
-- server, and a set of the same name in each. A member counted that was
-- already in the set (an expired counter not yet pruned) makes the size
-- too big, which can only refuse room: room then looks again (flush).
local CARD, PEND, PSETS = {}, {}, {}

local function begin()
  CARD, PEND, PSETS = {}, {}, {}
end

-- flush adds set's pending members to it.
local function flush(set)
  local p = PEND[set]
  if p and #p > 0 then
    -- The decisions that wrote their counters stand if this fails (a
    -- set of another type): their counters only go uncounted.
    redis.pcall('ZADD', set, 'NX', unpack(p))
    PEND[set] = {}
  end
end

-- flushall adds every set's pending members, at the end of a script call.
local function flushall()
  for j = 1, #PSETS do
    flush(PSETS[j])
  end
end

-- card returns the size of set as this script call knows it.
local function card(set)
  local c = CARD[set]
  if c == nil then
    c = rcall('ZCARD', set)
    CARD[set] = c
  end
  return c
end

-- joined makes key, a counter just written whose expiry is at ms, a
-- member of set, once the script call ends (or earlier, see flush).
local function joined(set, key, ms)
  local p = PEND[set]
  if p == nil then
    p = {}
    PEND[set] = p
    PSETS[#PSETS + 1] = set
  end
  local n = #p
  p[n + 1], p[n + 2] = ms, key
  CARD[set] = (CARD[set] or card(set)) + 1
  if n >= 510 then
    flush(set)
  end
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
  if card(set) + joining < cap then
    return true, pruned
  end
  flush(set)
  CARD[set] = rcall('ZCARD', set)
  if CARD[set] + joining < cap or rcall('ZSCORE', set, key) then
    return true, pruned
  end
  if pruned then
    return false, true
  end
  prune(set, ms)
  CARD[set] = rcall('ZCARD', set)
  return CARD[set] + joining < cap, true
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
  local c = CARD[set]
  if c and c + joining < cap then
    -- room's first answer, without the call.
    return nil, pruned, ms
  end
  local ok
  ok, pruned = room(set, cap, key, ms, pruned, joining)
  if ok then
    return nil, pruned, ms
  end
  return over, pruned, ms
end
