-- The key budget of the Redis store (budget.go), for the decision
-- (redis.lua): a request whose counter does not exist yet and that has an
-- overflow counter is counted against that instead when the database
-- (DBSIZE: every key of it, the node's on a Cluster) holds its budget of
-- keys. Redis keeps that count itself, so the budget keeps no state of its
-- own and costs one command per script call that meets a new caller
-- (room, below), and nothing for a counter that exists: the decision
-- learns that from the fields it reads anyway. A key that expired counts
-- until Redis has reclaimed it, as it does for memory.
--
-- The budget's arguments come last in ARGV, after the decision's, so that
-- the decision never sees them (see budget, below). The overflow counters
-- are in the slot of KEYS.

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

-- parsebudget returns s, a call's budget argument, as {cap, over}, over
-- mapping the index of each limit that has a budget to its overflow
-- counter; nil when s is malformed.
local function parsebudget(s)
  local m, cap, pos = string.match(s, '^(%d+) (%d+) ?()')
  if not m then
    return nil
  end
  local b = { cap = tonumber(cap), over = {} }
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

-- budget returns the budget of a call for limit i: the number of keys
-- below which a new caller's counter may be created, and limit i's
-- overflow counter; nil when i has none. It is read only for a counter
-- that does not exist yet. The call's arguments end at ARGV[top], its
-- budget argument: "0" when no limit has a budget, else "m budget" and,
-- for each of the m limits that has one, " i n over", with the Redis key
-- of its overflow counter and n its length (budgetArgs, budget.go).
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
    return b.cap, over
  end
  return nil
end

-- size is the number of keys in the database as this script call (one
-- FCALL or EVAL, which no other client's command interleaves) knows it:
-- nil until a new caller asks for room, then DBSIZE plus the keys the
-- call has created since (made). A script call starts it afresh (begin).
-- A key that the call's reads found expired, which Redis then deleted,
-- stays counted until the next script call: that can only refuse room.
local size = nil

local function begin()
  size = nil
end

-- made counts a key that the script call has just created.
local function made()
  if size then
    size = size + 1
  end
end

-- room reports whether a new caller's counter may be created under the
-- budget cap, when joining new counters of the call being decided are
-- about to be created before it; known, whether the script call knows
-- without a command (it has read DBSIZE).
local function room(cap, joining, known)
  if not size then
    if known then
      return false
    end
    size = rcall('DBSIZE')
  end
  return size + joining < cap
end
