-- The Redis store's one script (redis.go): it decides every limit of one
-- request and, only if every enforced limit admits it, counts it against
-- all of them, atomically. It mirrors Memory.Allow (memory.go).
--
-- Time is Redis's own (TIME), in whole microseconds, so that gateways with
-- skewed clocks agree (see "Redis: one limit for a fleet of gateways" in
-- the README). Every instant and duration here is an
-- integer number of microseconds held in a Lua number (a double): exact up
-- to 2^53 µs, about 285 years, which is why the store does not count in
-- nanoseconds as the memory store does.
--
-- KEYS[i] is the hash of limit i. Its fields "_id" (the counter's shape:
-- algorithm/window/precision), "_lk" (the end of a lockout) and "_x" (when
-- the key expires) are the store's; the other fields belong to the
-- algorithm. The algorithms' chunks (A below) may use the helpers fdiv,
-- fmod, muldiv and put defined here, and the locals that budget.lua
-- binds at the start of every call (rcall for redis.call, floor, ceil,
-- max, min, abs, tonumber, tostring, unpack, type).
--
-- ARGV[1] is "" (read TIME) or a fixed instant, for tests. Then for each
-- limit two values, and a third for a calendar unit:
--   the settings (settings below): "algorithm/window/precision limit
--     burst warmup lock", durations in µs, with " c" at the end for a
--     calendar unit; a rule's settings are the same string on every call,
--     parsed once by a function library;
--   the call: "" for the usual call (cost 1, decide and count, enforced,
--     no lease); "?" for the same on a key the gateway has not asked
--     about lately, so probably a new one: the script first asks whether
--     it exists (EXISTS), or copies the batch's first new key of the
--     same settings to it (COPY, see quick), which costs Redis less than
--     reading its fields and writing them; else "cost mode shadow rate
--     fleet have": the cost in units; the mode: "-" to decide and count, "d" to decide and count
--     nothing (limit.Defer), "c" to count without deciding
--     (limit.Charge), "h" to hold (limit.Hold), "r" to release
--     (limit.Release); "1" for a shadow limit, else "0"; and for a lease
--     the rate at which the gateway sees the key's requests (per second;
--     negative for a call that only asks for the next lease, whose every
--     token is leased), the fleet's size and the tokens the gateway still
--     holds for the key, else 0 0 0;
--   for a calendar unit, the calendar windows (see calendar below).
-- The key budget's arguments follow (redis_budget.lua).
--
-- The same source runs as a script (EVAL, EVALSHA: the last line returns
-- decide(KEYS, ARGV)) or as a Redis Function (FCALL, Redis 7: the last
-- line registers decide), whose helpers, algorithms and settings cache
-- are made once when the library is loaded rather than on every call
-- (redis_functions.go).
--
-- The reply is {allowed, then for each limit: allowed, remaining, reset
-- (µs), retry after (µs), tokens leased, the time their bucket ends
-- (µs), the bucket's number (left and bucket below), and the time since
-- the key's last lease of a token beyond its request (µs; -1 for none:
-- no gateway may hold tokens of it to give back); then the number of limits
-- sent to their overflow counter (redis_budget.lua)}, with 1 and 0 for true and false.
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
  set[n + 1] = arg(field)
  set[n + 2] = arg(value)
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

-- A maps each algorithm's name to a function that returns its functions
-- (and, once called, to them):
--   fields(p, now) returns the names of the fields decide needs first; the
--     script reads them with its own in one HMGET. It returns one table
--     for every call with the same names (they depend on p and now
--     only), which the script does not change but keeps what it derives
--     from the names in (names);
--   decide(key, p, now, v) returns a result {ok, remaining, reset, retry}
--     for a request of p.cost units (1 ≤ cost ≤ capacity), and whatever
--     else commit needs, also when not ok, without writing anything; v maps
--     the names of fields to their values (false when absent, as HMGET
--     gives them to Lua), and decide may read more fields itself; when
--     ok, the result also holds uncounted, the reset if the request is
--     not counted (State.UncountedReset): the time until the limit is
--     fully replenished as it stands, 0 when it is;
--   commit(key, p, now, r, set) counts p.cost units, after decide gave
--     r for the same state (for a charge, with another cost; for a lease,
--     with a cost of 1, which the lease raises): it appends the fields to
--     write to the list set (name, value, ...),
--     which the script writes with its own in one HSET, and returns the
--     instant from which the state is as good as fresh, so that the key
--     can expire then.
--   left(p, now, r), for the window algorithms only, returns the time from
--     now until the bucket or window that decide's r counts in ends: the
--     script may then count more than the one request (a lease, below);
--     bucket(p, r) returns that bucket's number, which names it among the
--     buckets of the key's shape (a gateway that holds a lease of it
--     tells a later lease of the same bucket by it).
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

-- expiry returns the instant, after the state's idle instant at, until
-- which a key is kept: up to a window (at most a second) more, so that a
-- busy key's expiry is moved once per window rather than on every
-- request.
local function expiry(at, p)
  return at + min(p.window, 1000000)
end

-- write writes the fields of set to key, moving its expiry to cover upto
-- if it does not; it returns the key's new time to live (ms), or nil when
-- its expiry did not move.
local function write(key, p, set, upto, x, now)
  if upto > x then
    x = expiry(upto, p)
    put(set, '_x', x)
    rcall('HSET', key, unpack(set))
    local t = ttl(x, now)
    rcall('PEXPIRE', key, arg(t))
    return t
  elseif #set > 0 then
    rcall('HSET', key, unpack(set))
  end
  return nil
end

-- JOIN and JOINMS hold, for each limit i of the call being decided, the
-- key budget's set that its new counter joins once written, or false, and
-- the instant (ms) from which its expiry counts (newcaller, budget.lua).
local JOIN, JOINMS = {}, {}

-- join makes limit i's new counter key, just written with a time to live
-- of t ms (nil: not written), a member of its budget set, due when it
-- expires (joined, budget.lua).
local function join(i, key, t)
  if JOIN[i] and t then
    joined(JOIN[i], key, arg(JOINMS[i] + t))
  end
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

-- settings returns the settings argument arg parsed: the counter's shape
-- (id), limit, window, precision, burst, warmup, lock, and whether a
-- calendar argument follows (cal); nil when arg is malformed. gw and gn
-- are for the algorithm to keep what it derives from them.
local function settings(arg)
  local s = SETTINGS[arg]
  if s then
    return s
  end
  local alg, window, precision, limit, burst, warmup, lock, cal =
    string.match(arg, '^([%w_]+)/(%d+)/(%d+) (%-?%d+) (%d+) (%d+) (%d+)( ?c?)$')
  if alg == nil then
    return nil
  end
  -- s is also the p (see decide) of every usual call (call "") without
  -- a calendar unit, which the decision does not change: it has every
  -- field of p, and a is the algorithm once it is known.
  s = {
    alg = alg, id = alg .. '/' .. window .. '/' .. precision,
    limit = tonumber(limit), window = tonumber(window), precision = tonumber(precision),
    burst = tonumber(burst), warmup = tonumber(warmup), lock = tonumber(lock), cal = cal ~= '',
    cost = 1, rate = 0, fleet = 0, have = 0, units = 1, shadow = false,
    defer = false, charge = false, hold = false, release = false, wait = 0, a = false,
    gw = false, gn = false, gj = false, gf = false, gt = false, fresh = false,
  }
  if nsettings >= 4096 then
    SETTINGS, nsettings = {}, 0
  end
  SETTINGS[arg] = s
  nsettings = nsettings + 1
  return s
end

-- MODES maps the mode of a call argument to the flag of p it sets.
local MODES = { d = 'defer', c = 'charge', h = 'hold', r = 'release' }

-- NOFIELDS are the fields of a limit that decides nothing (limit ≤ 0):
-- none of the algorithm's, and the store's (names, see decide).
local NOFIELDS = { names = { '_id', '_lk', '_x', '_lt', '_h', '_hx', '_a' } }

-- view returns the algorithm's fields own, whose values are v[4] on (as
-- HMGET gives them, see decide), keyed by name: for up to five, a table
-- made at its size.
local function view(own, v)
  local n = #own
  if n == 2 then
    return { [own[1]] = v[4], [own[2]] = v[5] }
  elseif n == 3 then
    return { [own[1]] = v[4], [own[2]] = v[5], [own[3]] = v[6] }
  elseif n == 5 then
    return { [own[1]] = v[4], [own[2]] = v[5], [own[3]] = v[6], [own[4]] = v[7], [own[5]] = v[8] }
  end
  local st = {}
  for j = 1, n do
    st[own[j]] = v[3 + j]
  end
  return st
end

-- P, R, L, X, LT, H, FRESH and OWNS hold, for each limit i of the call
-- being decided, its p, its result, the end of its lockout, its expiry,
-- the time of its last lease (nil for none), its units held, whether it
-- is new, and the algorithm's fields read (own, with the names of every
-- field read in own.names; see decide); ST, AH, U and HO its state as
-- read (view), the end of its queue ("_a": the latest instant room was
-- reserved at, 0 for none), its units, and whether it denied only for
-- units held or for its queue (no lockout then). They are made once: a
-- library's calls (FCALL) fill them afresh, for limits 1..n.
local P, R, L, X, LT, H, FRESH, OWNS = {}, {}, {}, {}, {}, {}, {}, {}
local ST, AH, U, HO = {}, {}, {}, {}

-- charge counts a charge against limit i of KEYS at now and returns the
-- result of the limit it leaves, for a next request of one unit, as
-- Memory's entry.charge.
local function charge(KEYS, i, now)
  local p, r, key = P[i], R[i], KEYS[i]
  if p.limit > 0 then
    local set = {}
    p.cost = p.units
    local idle = p.a.commit(key, p, now, r, set)
    p.cost = 1
    if FRESH[i] then
      put(set, '_id', p.id)
    end
    join(i, key, write(key, p, set, max(idle, L[i]), X[i], now))
    -- Decide afresh on what was written.
    local own = OWNS[i]
    r = p.a.decide(key, p, now, view(own, rcall('HMGET', key, unpack(own.names))))
  end
  if L[i] > now then
    r = lockout(r, L[i] - now)
  end
  if r.ok and r.remaining >= 0 then
    r.remaining = r.remaining + 1
    r.reset = r.uncounted
  end
  return r
end

-- clock returns Redis's clock (TIME) in µs.
local function clock()
  local t = rcall('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- NOSTATE is the fields of a key that does not exist, the algorithm's
-- and those decideAt reads: none. Nothing writes to it.
local NOSTATE = {}

-- freshFor returns what a usual call (cost 1, decide and count, no lease)
-- of s, settings without a calendar unit, does to a key that does not
-- exist, at now: the fields to write (set), the key's time to live
-- (ttln, in ms; ttl as an argument of PEXPIRE) and the reply, as decide
-- would make them for that key alone (f[1], and f[2] for a key sent to
-- its overflow counter; Redis only reads a reply, so one table serves
-- them all; with the reply as a string in s, see many); or false when such a call is denied, which decide then
-- decides. It depends on s and now only, so it is made once
-- per settings and instant (s.fresh): every new key of a batch (one
-- instant, many) after the first costs its two commands and no more.
-- key is the first such key, which the algorithm may read (it does not
-- exist).
local function freshFor(key, s, a, now)
  local f = s.fresh
  if f ~= false and f ~= nil and f.now == now and f.slack == slack then
    return f
  end
  f = false
  local r = a.decide(key, s, now, NOSTATE)
  if r.ok then
    local set = {}
    local idle = a.commit(key, s, now, r, set)
    put(set, '_id', s.id)
    local x = expiry(max(idle, 0), s)
    put(set, '_x', x)
    local t = ttl(x, now)
    f = { now = now, slack = slack, set = set, ttl = arg(t), ttln = t,
      { 1, 1, r.remaining, r.reset, r.retry, 0, 0, 0, -1, 0 },
      { 1, 1, r.remaining, r.reset, r.retry, 0, 0, 0, -1, 1 } }
    -- The same replies as one string each, which many answers with.
    local reply = string.format('1 1 %d %d %d 0 0 0 -1 ', r.remaining, r.reset, r.retry)
    f[1].s, f[2].s = reply .. '0', reply .. '1'
  end
  s.fresh = f
  return f
end

-- present asks Redis whether key exists: true or false, or nil when
-- EXISTS is refused (an ACL).
local function present(key)
  local e = redis.pcall('EXISTS', key)
  if e == 0 then
    return false
  elseif e == 1 then
    return true
  end
  return nil
end

-- TMPL maps each key that the short way created (create) in the script
-- call under way to its f (freshFor), as long as nothing else wrote it:
-- f.tmpl, the first of them for f, holds what every new key of f's
-- settings at f's instant gets, fields and expiry, and the next ones
-- are made by copying it (quick). A script call starts it afresh (begin):
-- a key of another script call may have changed since, or be in another
-- database. decideAt takes out every key it reads the long way, which
-- may write it.
local TMPL = {}

-- create makes key, a new key, what f (freshFor) says, as a copy of
-- f.tmpl when copy, else by writing it (the first such key becomes
-- f.tmpl), and makes it a member of the key budget's set bset, when not
-- nil, due when it expires (ms is the instant its expiry counts from,
-- newcaller). It reports false when COPY made nothing, and then whether
-- because key exists (true) or COPY is refused (false: an ACL).
local function create(f, key, bset, ms, copy)
  if copy then
    local e = redis.pcall('COPY', f.tmpl, key)
    if e ~= 1 then
      return false, e == 0
    end
  else
    rcall('HSET', key, unpack(f.set))
    rcall('PEXPIRE', key, f.ttl)
    if TMPL[f.tmpl] ~= f then
      f.tmpl = key
      TMPL[key] = f
    end
  end
  if bset then
    joined(bset, key, arg(ms + f.ttln))
  end
  return true
end

-- shortway returns the short way (freshFor) of the call whose arguments
-- follow ARGV[a0] when it is spelled "?" and its settings' short way is
-- worked out at now with slack sl; else nil.
local function shortway(ARGV, a0, now, sl)
  if ARGV[a0 + 3] ~= '?' then
    return nil
  end
  local s = SETTINGS[ARGV[a0 + 2]]
  local f = s and s.fresh
  if not f or f.now ~= now or f.slack ~= sl then
    return nil
  end
  return f
end

-- quick decides the usual call of one limit on key at now the short way,
-- before decideAt looks at anything else, when the call is spelled "?"
-- and its settings' short way at now is worked out already (freshFor:
-- not for the first new key of a batch): it returns the reply. The key
-- is a copy of the first such key of the script call (TMPL) when there
-- is one, else written anew. Otherwise it returns nil, and whether key
-- exists when it asked (nil when it did not). A key the key budget sends
-- to its overflow counter is left to decideAt, with that counter as the
-- third result; nothing is written then.
local function quick(key, ARGV, a0, top, now)
  local f = shortway(ARGV, a0, now, slack)
  if not f then
    return nil, nil
  end
  local copy = TMPL[f.tmpl] == f
  local bset, bcap, bover = budget(ARGV, top, 1)
  -- Without a copy to make, which tells whether key exists, ask first;
  -- and also when the budget may send key to its overflow counter, which
  -- only a key that does not exist may be (the key budget costs nothing
  -- for a counter that exists). An existing key, or EXISTS refused: decideAt
  -- reads it.
  if not copy or (bset and card(bset) >= bcap) then
    local e = present(key)
    if e ~= false then
      return nil, e
    end
  end
  local ms
  if bset then
    local over, pruned
    over, pruned, ms = newcaller(bset, bcap, bover, false, key, now, ARGV[a0 + 1] ~= '', 0)
    if over then
      -- decideAt counts it there, without asking the budget again.
      return nil, false, over
    end
  end
  local ok, found = create(f, key, bset, ms, copy)
  if not ok then
    return nil, found or nil
  end
  return f[1]
end

-- copied decides the usual call of one limit on key at now the shortest
-- way, for many: when the call is spelled "?", on Redis's clock, and its
-- settings' short way at now is worked out with a key of this script
-- call to copy (TMPL), and the key budget, if any, has room as this
-- script call knows it (CARD): it makes key a copy and returns the reply,
-- as the string many answers with. Otherwise it returns nil, and whether
-- it tried to copy, and then whether key exists (nil when COPY is
-- refused).
local function copied(key, ARGV, a0, top, now)
  if ARGV[a0 + 1] ~= '' then
    return nil, false
  end
  local f = shortway(ARGV, a0, now, 0)
  if not f or TMPL[f.tmpl] ~= f then
    return nil, false
  end
  local set, b = nil, ARGV[top]
  if b ~= '0' then
    b = BUDGETS[b]
    if not b then
      return nil, false
    end
    if b.over[1] then
      set = b.set
      local c = CARD[set]
      if not c or c >= b.cap then
        return nil, false
      end
    end
  end
  local ok, found = create(f, key, set, floor(now / 1000), true)
  if not ok then
    return nil, true, found or nil
  end
  return f[1].s
end

-- leasedAt returns when key's tokens were last leased (µs), or nil: what
-- a usual call does not read unless it is denied (decideAt).
local function leasedAt(key)
  return tonumber(rcall('HGET', key, '_lt'))
end

-- usual decides the usual call (cost 1, decide and count, no lease) of
-- one limit s, without a lockout or a calendar unit, on key, a counter of
-- its shape without a lockout, whose fields read (decideAt) are v, own
-- the algorithm's: what decideAt would, with less to keep track of; as
-- the string many answers with when spaced.
local function usual(key, s, a, own, v, now, spaced)
  local r = a.decide(key, s, now, view(own, v))
  if not r.ok then
    -- Nothing is written. When the key's tokens were last leased, which
    -- a usual call does not read otherwise: the gateway may wait for
    -- them to come back.
    local lt = leasedAt(key)
    return { 0, 0, r.remaining, r.reset, r.retry, 0, 0, 0, lt and now - lt or -1, 0 }
  end
  local set = {}
  local idle = a.commit(key, s, now, r, set)
  write(key, s, set, max(idle, 0), v[3] and num(v[3]) or 0, now)
  if spaced then
    return '1 1 ' .. arg(r.remaining) .. ' ' .. arg(r.reset) .. ' ' .. arg(r.retry) .. ' 0 0 0 -1 0'
  end
  return { 1, 1, r.remaining, r.reset, r.retry, 0, 0, 0, -1, 0 }
end

-- K holds the keys of the call being decided (decideAt), made once.
local K = {}

-- decideKey decides limit p of key (algorithm a, state st as read, held
-- units held, lockout end lk) for units units at x, as Memory's
-- entry.decide, holds included: it returns the result, and whether it
-- denied only for the units held by requests in flight.
local function decideKey(key, p, a, st, held, lk, units, x)
  local r, heldonly = nil, false
  if p.limit < 0 then
    r = { ok = true, remaining = -1, reset = 0, retry = 0, uncounted = 0 }
  elseif p.limit == 0 or p.cost > capacity(p) then
    -- Blocked, or a cost it can never admit (Params.Capacity).
    r = { ok = false, remaining = 0, reset = p.window, retry = p.window }
  elseif p.hold and held > 0 then
    -- Room for this request's units and every unit held.
    if p.cost + held > capacity(p) then
      r = { ok = false, remaining = 0, reset = p.window, retry = p.window }
    else
      p.cost = units + held
      r = a.decide(key, p, x, st)
      p.cost = units
    end
    if not r.ok and a.decide(key, p, x, st).ok then
      -- Denied only for requests in flight: no lockout, a short wait.
      heldonly = true
      r.retry = min(r.retry, HELD_RETRY)
    end
  else
    r = a.decide(key, p, x, st)
  end
  if lk > x and not p.charge and not p.release then
    r = lockout(r, lk - x)
  end
  return r, heldonly
end

-- enforced reports whether limit p's denial denies the call.
local function enforced(p)
  return not p.shadow and not p.charge and not p.release
end

-- nexttry returns the instant after at when the enforced limits that
-- the results rs denied said they would admit, or nil if one never does.
local function nexttry(n, at, rs)
  local t = at
  for i = 1, n do
    if not rs[i].ok and enforced(P[i]) then
      if rs[i].retry <= 0 then
        return nil
      end
      t = max(t, at + rs[i].retry)
    end
  end
  return t
end

-- TRY holds the results of a reservation's try (reserve), made once.
local TRY, TRYHO = {}, {}

-- reserve finds, for a call of n limits decided (R) with no room now —
-- a limit denied, or a key's queue ends at at — the earliest instant
-- within the call's wait at which every enforced limit admits it, as
-- Memory.reserve (memory.go) does, and leaves R those decided there. It
-- returns the instant and true; or, when the call cannot wait that long,
-- now and the decision, R as decided now with the limits that admitted
-- only at the end of a queue denied until then (no lockout).
local function reserve(n, now, at)
  -- The call's wait: the least of its enforced limits without room now.
  local wait = -1
  for i = 1, n do
    local p = P[i]
    if enforced(p) and (not R[i].ok or AH[i] > now) then
      if p.wait <= 0 or p.limit == 0 or (p.limit > 0 and p.cost > capacity(p)) then
        wait = 0
        break
      end
      if wait < 0 or p.wait < wait then
        wait = p.wait
      end
    end
  end
  local t = wait > 0 and nexttry(n, at, R)
  local rounds = 0
  while t and rounds < 4 and t - now <= wait do
    local ok, tat = true, t
    for i = 1, n do
      local p = P[i]
      if p.charge or p.release then
        TRY[i], TRYHO[i] = R[i], false
      else
        local x = max(t, AH[i])
        if enforced(p) then
          tat = max(tat, x)
        end
        TRY[i], TRYHO[i] = decideKey(K[i], p, p.a, ST[i], H[i], L[i], U[i], x)
        if not TRY[i].ok and enforced(p) then
          ok = false
        end
      end
    end
    if ok then
      for i = 1, n do
        R[i], HO[i] = TRY[i], TRYHO[i]
      end
      return tat, true
    end
    t = nexttry(n, tat, TRY)
    rounds = rounds + 1
  end
  local allowed = true
  for i = 1, n do
    local p, r = P[i], R[i]
    if not p.charge and not p.release and AH[i] > now then
      if r.ok and enforced(p) then
        r.ok, HO[i] = false, true
      end
      if not r.ok then
        r.retry = r.retry + (AH[i] - now)
      end
    end
    if not r.ok and enforced(p) then
      allowed = false
    end
  end
  return now, allowed
end

-- decideAt is one call: its n keys are those of KEYS after the first k0,
-- and its arguments (as described at the top) those of ARGV after the
-- first a0, up to ARGV[top]. at, when not nil, is Redis's clock already
-- read for it (many, below), which may then get the reply of a call of
-- one limit as the string many answers with. tried says that copied
-- tried to copy the key of a call of one limit, and known whether it
-- exists then (nil: not known).
local function decideAt(KEYS, ARGV, at, k0, a0, n, top, tried, known)
  local now
  slack = 0
  if ARGV[a0 + 1] ~= '' then
    now = tonumber(ARGV[a0 + 1])
    slack = 3600000
  else
    now = at or clock()
  end
  if nnums >= 1024 then
    NUMS, nnums = {}, 0
  end
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
  local overflowed = 0
  -- pruned is whether the key budget's set was pruned in this call, and
  -- joining how many of its new counters are to join it (JOIN).
  local pruned, joining = false, 0

  for i = 1, n do
    K[i] = KEYS[k0 + i]
  end
  local P, R, L, X, LT, H, fresh, owns = P, R, L, X, LT, H, FRESH, OWNS
  local o = 2
  for i = 1, n do
    local s = settings(ARGV[a0 + o])
    if s == nil then
      return redis.error_reply('ERR gateway script: bad settings ' .. tostring(ARGV[a0 + o]))
    end
    local call = ARGV[a0 + o + 1]
    local probe = call == '?'
    if probe then
      call = ''
    end
    local p = s
    if call ~= '' or s.cal then
      -- A call that p records: p is a copy of s, with every field p may
      -- get in the constructor, so that the table is made at its size.
      p = {
        alg = s.alg, id = s.id, limit = s.limit, window = s.window, precision = s.precision,
        burst = s.burst, warmup = s.warmup, lock = s.lock,
        cost = 1, rate = 0, fleet = 0, have = 0, units = 1, shadow = false,
        defer = false, charge = false, hold = false, release = false, wait = 0,
        cal = false, a = s.a, gw = s.gw, gn = s.gn, gj = s.gj, gf = s.gf, gt = s.gt, span = false,
      }
    end
    if call ~= '' then
      local cost, mode, shadow, rate, fleet, have, wait = string.match(call, '^(%d+) (%S) ([01]) (%-?%d+) (%d+) (%d+) ?(%d*)$')
      if cost == nil then
        return redis.error_reply('ERR gateway script: bad call ' .. call)
      end
      p.cost, p.shadow = tonumber(cost), shadow == '1'
      p.rate, p.fleet, p.have = tonumber(rate), tonumber(fleet), tonumber(have)
      p.wait = tonumber(wait) or 0
      if MODES[mode] then
        p[MODES[mode]] = true
      end
    end
    o = o + 2
    -- A charge is counted whatever it costs; what it reports is the limit
    -- it leaves, for a next request of one unit.
    local units = p.cost
    if p.charge or p.release then
      p.cost = 1
    end
    if s.cal then
      p.cal = calendar(ARGV[a0 + o], now)
      o = o + 1
      if p.cal == nil then
        return redis.error_reply('ERR gateway script: Redis\'s clock is more than a calendar window away from the gateway\'s')
      end
      p.id = p.id .. '/' .. p.cal.id
    end
    local a = p.a
    if not a then
      a = A[p.alg]
      if a == nil then
        return redis.error_reply('ERR gateway script: unknown algorithm ' .. p.alg)
      end
      if type(a) == 'function' then
        a = a()
        A[p.alg] = a
      end
      p.a, s.a = a, a
    end
    local key = K[i]
    TMPL[key] = nil
    -- The fields read (names): the store's first, the shape, the end of
    -- a lockout and the instant the key expires; then the algorithm's
    -- (own, m of them); then the store's that only some calls use (a
    -- usual call, p == s, reads up to the algorithm's, the first 3 + m):
    -- when a token beyond its request was last leased (µs), the units
    -- held and until when they are.
    -- The algorithm's fields (own) are a table of its, made once; so are
    -- the names read (own.names), which nothing changes either.
    local names_i, own
    if p.limit > 0 then
      own = a.fields(p, now)
      names_i = own.names
      if not names_i then
        names_i = { '_id', '_lk', '_x', unpack(own) }
        for j = 4, #names_i do
          names_i[j] = tostring(names_i[j])
        end
        local m = #names_i
        names_i[m + 1], names_i[m + 2], names_i[m + 3], names_i[m + 4] = '_lt', '_h', '_hx', '_a'
        own.names = names_i
      end
    else
      own, names_i = NOFIELDS, NOFIELDS.names
    end
    owns[i] = own
    local m = #own
    local v
    if probe and n == 1 and p == s and p.limit > 0 and exists ~= true and (exists == false or present(key) == false) then
      v = NOSTATE
    elseif p == s then
      v = rcall('HMGET', key, unpack(names_i, 1, 3 + m))
    else
      v = rcall('HMGET', key, unpack(names_i))
    end
    if n == 1 and p == s and v[1] == s.id and not v[2] and s.lock == 0 and s.limit > 0 then
      return usual(key, s, a, own, v, now, at ~= nil)
    end
    local bset, bcap, bover
    if not v[1] then
      bset, bcap, bover = budget(ARGV, top, i)
    end
    JOIN[i] = false
    if bset then
      -- A new caller's counter (every counter has "_id"): the key budget
      -- decides whether it may be created (budget.lua).
      local over, ms
      if qover then
        over, pruned = qover, true
      else
        over, pruned, ms = newcaller(bset, bcap, bover, pruned, key, now, ARGV[a0 + 1] ~= '', joining)
      end
      if not over then
        JOIN[i], JOINMS[i] = bset, ms
        joining = joining + 1
      end
      if over then
        key = over
        TMPL[key] = nil
        K[i] = key
        overflowed = overflowed + 1
        v = rcall('HMGET', key, unpack(names_i, 1, p == s and 3 + m or #names_i))
      end
    end
    if n == 1 and p == s and not v[1] and p.limit > 0 then
      -- The usual call on a new key, alone: what it writes and answers
      -- is the same for every new key of its settings at this instant.
      local f = freshFor(key, s, a, now)
      if f then
        create(f, key, JOIN[i], JOINMS[i], false)
        return f[overflowed + 1]
      end
    end
    local lk, x, held, ahead = 0, 0, 0, 0
    LT[i] = nil
    if v[1] then
      lk, x = v[2] and num(v[2]) or 0, v[3] and num(v[3]) or 0
      if p ~= s then
        LT[i] = tonumber(v[4 + m])
        if (tonumber(v[6 + m]) or 0) > now then
          held = tonumber(v[5 + m]) or 0
        end
        ahead = tonumber(v[7 + m]) or 0
      elseif v[2] then
        -- A key with a queue has "_lk" (0 without a lockout), so that
        -- the usual call, which does not read "_a", leaves it here.
        ahead = tonumber(rcall('HGET', key, '_a')) or 0
      end
    end
    local st = view(own, v)
    fresh[i] = v[1] ~= p.id
    if v[1] and v[1] ~= p.id then
      -- The counter changed shape (a reload changed its algorithm, window
      -- or precision): start afresh, keeping the lockout (in progress, or
      -- ended but in force again if the clock steps back, as in memory).
      rcall('DEL', key)
      st, x, LT[i], held, ahead = {}, 0, nil, 0, 0
      if p.lock > 0 and lk > 0 then
        x = expiry(max(lk, now), p)
        rcall('HSET', key, '_id', p.id, '_lk', lk, '_x', x)
        rcall('PEXPIRE', key, ttl(x, now))
        fresh[i] = false
      end
    end
    if p.lock == 0 and lk > 0 then
      -- The rule no longer locks out: lift a lockout in progress.
      rcall('HDEL', key, '_lk')
      lk = 0
    end
    if ahead > 0 and ahead <= now then
      -- The queue has ended: the usual call may decide the key again.
      rcall('HDEL', key, '_a')
      if lk == 0 and v[2] then
        rcall('HDEL', key, '_lk')
      end
      ahead = 0
    end
    local r, ho = decideKey(key, p, a, st, held, lk, units, max(now, ahead))
    if p == s and not r.ok and v[1] then
      -- When the key's tokens were last leased, which a usual call did
      -- not read: the gateway may wait for them to come back.
      LT[i] = leasedAt(key)
    end
    if p ~= s then
      p.units = units
    end
    P[i], R[i], L[i], X[i], H[i] = p, r, lk, x, held
    ST[i], AH[i], U[i], HO[i] = st, ahead, units, ho
  end

  local allowed, at = true, now
  for i = 1, n do
    if not enforced(P[i]) then
      -- A shadow's queue holds nothing up.
    elseif not R[i].ok then
      allowed = false
    elseif AH[i] > at then
      at = AH[i]
    end
  end
  if not allowed or at > now then
    at, allowed = reserve(n, now, at)
  end

  local out = { allowed and 1 or 0, nil, nil, nil, nil, nil, nil, nil, nil, nil }
  local no = 1
  for i = 1, n do
    local p, r, key = P[i], R[i], K[i]
    if p.charge then
      r = charge(K, i, now)
    elseif p.release then
      if H[i] > 0 then
        rcall('HSET', key, '_h', max(H[i] - p.units, 0))
      end
    elseif not r.ok then
      if p.lock > 0 and not p.shadow and L[i] <= now and not HO[i] then
        local lk = now + p.lock
        join(i, key, write(key, p, { '_id', p.id, '_lk', lk }, lk, X[i], now))
        r = lockout(r, p.lock)
      end
    elseif allowed and p.hold and p.limit > 0 then
      -- Held, not counted: Remaining is what the held units leave.
      local hx = now + HOLD_TTL
      local set = { '_h', H[i] + p.cost, '_hx', hx }
      if fresh[i] then
        put(set, '_id', p.id)
      end
      join(i, key, write(key, p, set, hx, X[i], now))
      r.reset = r.uncounted
    elseif allowed and not p.defer and not p.hold then
      -- Counted at the instant reserved (at), or at the end of its own
      -- queue for a shadow behind one.
      local ci = max(at, AH[i])
      if p.limit > 0 and p.rate ~= 0 and p.cost == 1 and p.a.left and ci == now then
        -- A lease: what the rate uses in the next 15ms or until the
        -- bucket ends, beyond what the gateway holds, within the room left
        -- (r.remaining + 1 with this request) / (2 × fleet). Tokens the
        -- gateway stops using come back (lease_return.lua).
        r.span = p.a.left(p, now, r)
        local room = r.remaining + 1
        local want = ceil(abs(p.rate) * min(r.span, 15000) / 1000000) - p.have
        p.cost = max(min(want, fdiv(room, 2 * max(p.fleet, 1)), room), 1)
        r.remaining = r.remaining - (p.cost - 1)
      end
      if p.limit > 0 then
        local set = { nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil }
        local idle = p.a.commit(key, p, ci, r, set)
        if ci > now then
          -- The end of its queue; "_lk" sends the usual call here.
          put(set, '_a', ci)
          if L[i] == 0 then
            put(set, '_lk', 0)
          end
        end
        if r.span and (p.cost > 1 or p.rate < 0) then
          put(set, '_lt', now)
          LT[i] = now
        end
        if fresh[i] then
          put(set, '_id', p.id)
        end
        join(i, key, write(key, p, set, max(idle, L[i]), X[i], now))
      end
    elseif r.remaining >= 0 then
      -- Decided as if counted; it was not.
      r.remaining = r.remaining + p.cost
      r.reset = r.uncounted
    end
    out[no + 1] = r.ok and 1 or 0
    out[no + 2] = r.remaining
    out[no + 3] = r.reset
    out[no + 4] = r.retry
    if r.ok and at > now then
      -- Admitted at a reserved instant: the delay until then.
      out[no + 4] = at - now
    end
    out[no + 5] = r.span and p.cost or 0
    out[no + 6] = r.span or 0
    out[no + 7] = r.span and p.a.bucket(p, r) or 0
    out[no + 8] = LT[i] and now - LT[i] or -1
    no = no + 8
  end
  out[no + 1] = overflowed
  return out
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
