-- The Redis store's one script: it decides every limit of one request
-- and, only if every enforced limit admits it, counts it against all of
-- them, atomically. It mirrors Memory.Allow (memory.go).
--
-- script.go assembles it from six files, in this order, each using only
-- what the ones before it define:
--   budget.lua        the key budget, and the locals every piece uses;
--   redis.lua         this contract, the helpers, the settings, the
--                     state of the call being decided, and the
--                     algorithms' chunks (A);
--   redis_state.lua   a counter's state: its key read (load) and
--                     written (save), one string or a hash;
--   redis_decide.lua  the decision: each limit's key read and decided
--                     (decideLimit), the reservation (reserve), and a
--                     batch's new keys made copies of its first (again);
--   redis_acts.lua    the acts that follow: what each limit's key is
--                     written (count, hold, release, charge, lockout)
--                     and the reply (act);
--   redis_entry.lua   the entry points: one call (decideAt, decide), a
--                     batch (many), and the library's function (entry).
--
-- Time is Redis's own (TIME), in whole microseconds, so that gateways with
-- skewed clocks agree (see "Redis: one limit for a fleet of gateways" in
-- the README). Every instant and duration here is an
-- integer number of microseconds held in a Lua number (a double): exact up
-- to 2^53 µs, about 285 years, which is why the store does not count in
-- nanoseconds as the memory store does.
--
-- KEYS[i] is the counter of limit i: its fields as one string, or a hash
-- of them (redis_state.lua). Its fields "_id" (the counter's shape:
-- algorithm/window/precision), "_lk" (the end of a lockout), "_x" (when
-- the key expires), "_lt" (when a token beyond its request was last
-- leased), "_h" and "_hx" (units held, and until when) and "_a" (the end
-- of its queue) are the store's; the other fields belong to the
-- algorithm. The algorithms' chunks (A below) may use the helpers fdiv,
-- fmod, muldiv and put defined here, and the locals that budget.lua
-- binds at the start of every call (rcall for redis.call, floor, ceil,
-- max, min, abs, tonumber, tostring, unpack, type).
--
-- ARGV[1] is "" (read TIME) or a fixed instant, for tests. Then for each
-- limit two values, and a third for a calendar unit:
--   the settings (settings below): "algorithm/window/precision limit
--     burst warmup lock", durations in µs, with " c" at the end for a
--     calendar unit and then " h" for counters kept as hashes
--     (--redis-layout hash); a rule's settings are the same string on
--     every call, parsed once by a function library;
--   the call: "" for the usual call (cost 1, decide and count, enforced,
--     no lease); else "cost mode shadow rate fleet have": the cost in
--     units; the mode: "-" to decide and count, "d" to decide and count
--     nothing (limit.Defer), "c" to count without deciding
--     (limit.Charge), "h" to hold (limit.Hold), "r" to release
--     (limit.Release), "g" to read (limit.Read: decided as "d", and its
--     reply says what the key holds past the limit); "1" for a shadow
--     limit, else "0"; and for a lease
--     the rate at which the gateway sees the key's requests (per second;
--     negative for a call that only asks for the next lease, whose every
--     token is leased), the fleet's size and the tokens the gateway still
--     holds for the key, else 0 0 0;
--   for a calendar unit, the calendar windows (see calendar below).
-- The key budget's arguments follow (budget.lua). A call that counts
-- comes with three arguments ahead of ARGV[1], "!" (or "!!" when sent
-- again), its memo's life and its ID, and its memo's key after its own in
-- KEYS: Redis runs it once however often it is sent (once,
-- redis_entry.lua).
--
-- The same source runs as a script (EVAL, EVALSHA: the last line returns
-- decide(KEYS, ARGV)) or as a Redis Function (FCALL, Redis 7: the last
-- line registers entry), whose helpers, algorithms and settings cache
-- are made once when the library is loaded rather than on every call
-- (functions.go).
--
-- The reply is {allowed, then for each limit: allowed, remaining, reset
-- (µs), retry after (µs), tokens leased (for a read, which leases none,
-- the units past the limit: limit.Result's Over), the time their bucket ends
-- (µs; for a read, the units held: limit.Result's Held), the bucket's number (left and bucket below), and the time since
-- the key's last lease of a token beyond its request (µs; -1 for none:
-- no gateway may hold tokens of it to give back); then the number of limits
-- sent to their overflow counter (budget.lua)}, with 1 and 0 for true and false.
--
-- A lease (README, "Leases") counts more than the request into the bucket
-- or window it counts in, when every limit admits it: as many as the
-- gateway's rate would use in the next 15ms (and before the bucket ends)
-- beyond the tokens it still holds, at most the room left divided by twice the fleet's size, at least the
-- request itself. The gateway admits that many more locally until the
-- bucket ends, so every admission falls in the bucket it was counted in.

-- fdiv returns ⌊a/b⌋ for integers a, b > 0 below 2^53, exactly: the
-- quotient of two doubles can round up to the next integer.
local function fdiv(a, b)
  local q = floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- fmod returns a mod b in 0..b-1 for b > 0.
local function fmod(a, b)
  return a - fdiv(a, b) * b
end

local EXACT = 9007199254740992 -- 2^53

-- muldiv returns ⌊a·b/c⌋ and a·b mod c for integers 0 ≤ a, b < 2^53 and
-- 0 < c ≤ 2^52 whose quotient is below 2^53, although a·b itself may not
-- be (the GCRA's k·Window/Limit): a·b = ⌊a/c⌋·b·c + (a mod c)·b, and the
-- second product is divided bit by bit, every partial sum staying below
-- 2c.
local function muldiv(a, b, c)
  if a * b < EXACT then
    local q = fdiv(a * b, c)
    return q, a * b - q * c
  end
  local aq = fdiv(a, c)
  local ar = a - aq * c
  local bits, x = {}, b
  while x > 0 do
    local h = fdiv(x, 2)
    bits[#bits + 1] = x - 2 * h
    x = h
  end
  local q, r = 0, 0
  for i = #bits, 1, -1 do
    q, r = 2 * q, 2 * r
    if r >= c then q, r = q + 1, r - c end
    if bits[i] == 1 then
      r = r + ar
      if r >= c then q, r = q + 1, r - c end
    end
  end
  return aq * b + q, r
end

-- NUMS maps the numbers that recent calls sent as arguments to their
-- strings (arg), up to 1024 of them (nnums), then starts afresh: a
-- batch's decisions (many, below) share one instant, and mostly the same
-- numbers (the bucket, the expiry, small counts), as do the batches
-- after it.
local NUMS, nnums = {}, 0

-- arg returns x as an argument of a command: an integer below 2^53 as
-- the string of its digits, which is the string Redis makes of a number
-- argument ("%.17g"), at a fraction of the cost of Redis's formatting of
-- a double once NUMS has it; anything else as it is.
local function arg(x)
  local s = NUMS[x]
  if s then
    return s
  end
  if type(x) ~= 'number' or x ~= floor(x) or x >= EXACT or x <= -EXACT then
    return x
  end
  s = string.format('%d', x)
  NUMS[x] = s
  nnums = nnums + 1
  return s
end

-- put appends a field and its value to the list set.
local function put(set, field, value)
  local n = #set
  set[n + 1] = field
  set[n + 2] = value
end

-- capacity returns the largest cost a request can be admitted with
-- (Params.Capacity): burst, or limit when burst is 0.
local function capacity(p)
  if p.burst > 0 then
    return p.burst
  end
  return p.limit
end

-- slack is added to every expiry: none on Redis's clock; an hour on a
-- test's fixed clock, which Redis's expiry does not follow. It is set at
-- the start of every call (decide, below).
local slack = 0

-- ttl returns the time in milliseconds from now until at, rounded up and at
-- least 1: what PEXPIRE needs so that a key lives until at.
local function ttl(at, now)
  return max(ceil((at - now) / 1000), 1) + slack
end

-- calendar returns the calendar window that now falls in, from arg: the
-- unit and zone ("calendar-day@Europe/Berlin"), then the starts of the
-- windows before, at and after the gateway's clock and the end of the
-- last (µs), separated by spaces (calendarArg in calendar.go). It returns
-- a table {id = the unit and zone, b = the instants, start, stop}, or nil
-- when now is outside them: the gateway's clock and Redis's are more than
-- a window apart.
local function calendar(arg, now)
  local c = { b = {} }
  for f in string.gmatch(arg, '[^ ]+') do
    if c.id == nil then
      c.id = f
    else
      c.b[#c.b + 1] = tonumber(f)
    end
  end
  for i = 1, #c.b - 1 do
    if c.b[i] <= now and now < c.b[i + 1] then
      c.start, c.stop = c.b[i], c.b[i + 1]
      return c
    end
  end
  return nil
end

-- span returns the window of p that now falls in, and its end: window
-- number win is [win·window, (win+1)·window); with a calendar unit, win is
-- the window's start.
local function span(p, now)
  if p.cal then
    return p.cal.start, p.cal.stop
  end
  local win = fdiv(now, p.window)
  return win, (win + 1) * p.window
end

-- spanend returns the end of window win of p (see span). For a calendar
-- window that is not among the script's (a clock that stepped back by
-- more than a window), it returns the end of now's.
local function spanend(p, win)
  if p.cal then
    local b = p.cal.b
    for i = 1, #b - 1 do
      if b[i] == win then
        return b[i + 1]
      end
    end
    return p.cal.stop
  end
  return (win + 1) * p.window
end

-- clock returns Redis's clock (TIME) in µs.
local function clock()
  local t = rcall('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- A maps each algorithm's name to a function that returns its functions
-- (and, once called, to them):
--   fields(p, now) returns the names of the fields decide needs first,
--     which the script reads with its own in one HMGET from a counter
--     kept as a hash (redis_state.lua). It returns one table for every
--     call with the same names (they depend on p and now only), which the
--     script does not change but keeps what it derives from the names in
--     (names);
--   decide(key, p, now, v) returns a result {ok, remaining, reset, retry}
--     for a request of p.cost units (1 ≤ cost ≤ capacity), and whatever
--     else commit needs, also when not ok, without writing anything; v maps
--     the names of fields to their values (a ring's slots are numbers),
--     nil or false when absent: a hash's fields not read yet are read when
--     looked up (redis_state.lua). When ok, the result also holds
--     uncounted, the reset if the request is
--     not counted (State.UncountedReset): the time until the limit is
--     fully replenished as it stands, 0 when it is;
--   commit(key, p, now, r, set) counts p.cost units, after decide gave
--     r for the same state (for a charge, with another cost; for a lease,
--     with a cost of 1, which the lease raises): it appends the fields to
--     write to the list set (name, value, ...), which the script writes
--     with its own (save, redis_state.lua), and returns the
--     instant from which the state is as good as fresh, so that the key
--     can expire then.
--   over(key, p, now, v) returns the units counted past the limit that
--     the state holds at now (limit.Result's Over, State.Over), 0 when
--     none, from the fields v as decide gets them; for a read;
--   left(p, now, r), for the window algorithms only, returns the time from
--     now until the bucket or window that decide's r counts in ends: the
--     script may then count more than the one request (a lease, below);
--     bucket(p, r) returns that bucket's number, which names it among the
--     buckets of the key's shape (a gateway that holds a lease of it
--     tells a later lease of the same bucket by it).
--   log, when true, says that the state is kept as a hash whatever the
--     layout: a log the algorithm reads a few fields of with HGET.
-- p holds limit, window, precision, burst and warmup (µs); the functions
-- are called only for limit ≥ 1. p.cal is the calendar window (see
-- calendar) of a limit with a calendar unit, nil otherwise.
local A = {}
--ALGORITHMS--

-- lockout makes r the denial of a locked key that is left µs from its end.
-- A locked key counts nothing, so its reset is that without the request.
local function lockout(r, left)
  local reset = r.reset
  if r.ok then
    reset = r.uncounted
  end
  return { ok = false, remaining = 0, reset = max(reset, left), retry = max(r.retry, left) }
end

-- fromQueue makes r, a result decided at the end of its key's queue of
-- reservations that ends left µs from now, run from now: its reset and,
-- when denied, its retry are left longer (as limit.Result.fromQueue).
local function fromQueue(r, left)
  r.reset = r.reset + left
  if not r.ok then
    r.retry = r.retry + left
  end
end

-- expiry returns the instant, after the state's idle instant at, until
-- which a key is kept: up to a window (at most a second) more, so that a
-- busy key's expiry is moved once per window rather than on every
-- request.
local function expiry(at, p)
  return at + min(p.window, 1000000)
end

-- HOLD_TTL is how long units held (limit.Hold) stay held after the last
-- hold on a key (µs): the holds of a gateway that died before releasing
-- them are given back once the key has seen no hold for this long.
local HOLD_TTL = 300000000
-- HELD_RETRY is the retry of a hold denied only for the units held by
-- requests in flight (HeldRetryAfter, µs).
local HELD_RETRY = 1000000

-- SETTINGS caches the parsed settings arguments (see settings). In a
-- function library (FCALL) it lives as long as the library, so a rule's
-- settings are parsed once; a script (EVAL) starts with it empty.
local SETTINGS, nsettings = {}, 0

-- FLAGS maps the ends of a settings argument to whether a calendar
-- argument follows.
local FLAGS = { [''] = false, [' c'] = true, [' h'] = false, [' c h'] = true }

-- settings returns the settings argument arg parsed: the counter's shape
-- (id), limit, window, precision, burst, warmup, lock, whether a
-- calendar argument follows (cal, " c") and whether its keys are hashes
-- (hashed, " h": redis_state.lua); nil when arg is malformed. gw and gn
-- are for the algorithm to keep what it derives from them.
local function settings(arg)
  local s = SETTINGS[arg]
  if s then
    return s
  end
  local alg, window, precision, limit, burst, warmup, lock, flags =
    string.match(arg, '^([%w_]+)/(%d+)/(%d+) (%-?%d+) (%d+) (%d+) (%d+)(.*)$')
  local cal, hash = FLAGS[flags], flags == ' h' or flags == ' c h'
  if alg == nil or cal == nil then
    return nil
  end
  -- s is also the p (see decide) of every usual call (call "") without
  -- a calendar unit, which the decision does not change: it has every
  -- field of p, and a is the algorithm once it is known.
  s = {
    alg = alg, id = alg .. '/' .. window .. '/' .. precision,
    limit = tonumber(limit), window = tonumber(window), precision = tonumber(precision),
    burst = tonumber(burst), warmup = tonumber(warmup), lock = tonumber(lock), cal = cal, hashed = hash,
    cost = 1, rate = 0, fleet = 0, have = 0, units = 1, shadow = false,
    defer = false, charge = false, hold = false, release = false, wait = 0, a = false,
    gw = false, gn = false, gj = false, gf = false, gt = false, first = false,
  }
  if nsettings >= 4096 then
    SETTINGS, nsettings = {}, 0
  end
  SETTINGS[arg] = s
  nsettings = nsettings + 1
  return s
end

-- MODES maps the mode of a call argument to the flag of p it sets.
local MODES = { d = 'defer', c = 'charge', h = 'hold', r = 'release', g = 'read' }

-- NOFIELDS are the fields of a limit that decides nothing (limit ≤ 0):
-- none of the algorithm's, and the store's (names, see decide).
local NOFIELDS = { names = { '_id', '_lk', '_x', '_lt', '_h', '_hx', '_a' } }

-- P, R, L, X, LT and H hold, for each limit i of the call being
-- decided, its p, its result, the end of its lockout, its expiry, the
-- time of its last lease (nil for none) and its units held; AH, U and HO
-- the end of its queue ("_a": the latest instant room was reserved at, 0
-- for none), its units, and whether it denied only for units held or for
-- its queue (no lockout then). Its key's fields are V[i]
-- (redis_state.lua). They are made once: a library's calls (FCALL) fill
-- them afresh, for limits 1..n.
local P, R, L, X, LT, H = {}, {}, {}, {}, {}, {}
local AH, U, HO = {}, {}, {}

-- K holds the keys of the call being decided (decideAt), made once.
local K = {}

-- overflowed and joining are of the call being decided, set afresh by
-- decideAt: how many of its limits were sent to their overflow counter,
-- and how many of its new callers' counters the key budget let in
-- (keyBudget, redis_decide.lua), which are about to be created.
local overflowed, joining = 0, 0
