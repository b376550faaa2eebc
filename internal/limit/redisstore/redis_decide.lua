-- The decision (after redis_state.lua; see redis.lua for the script's
-- contract and its files): each limit of a call, one after the other, has
-- its arguments parsed (limitOf), its key read (load, keyBudget,
-- keyState) and decided (decideRead, decideKey), which decideLimit does
-- in that order; then, when a limit denied or a queue is ahead, the
-- earliest instant every enforced limit admits the call within its wait
-- (settle, reserve). Nothing here counts a request: the acts that follow
-- (redis_acts.lua) write what was decided. The exception is what a key
-- needs before it can be decided (a counter that changed shape, a
-- lockout lifted, a queue ended).

-- instant returns the instant of the call whose arguments follow ARGV[a0]:
-- its fixed instant (a test's), else at, Redis's clock when the caller
-- read it (many), else Redis's clock; and sets slack for it. It also
-- starts NUMS afresh when it is full.
local function instant(ARGV, a0, at)
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
  return now
end

-- callOf returns the p of a call of settings s that p records (a call
-- other than the usual, or a calendar unit): a copy of s, with every
-- field p may get in the constructor, so that the table is made at its
-- size, and the call argument's cost, mode, shadow, lease and wait in it;
-- or an error reply when the call argument is malformed.
local function callOf(s, call)
  local p = {
    alg = s.alg, id = s.id, limit = s.limit, window = s.window, precision = s.precision,
    burst = s.burst, warmup = s.warmup, lock = s.lock, hashed = s.hashed,
    cost = 1, rate = 0, fleet = 0, have = 0, units = 1, shadow = false,
    defer = false, charge = false, hold = false, release = false, read = false, wait = 0,
    cal = false, a = s.a, gw = s.gw, gn = s.gn, gj = s.gj, gf = s.gf, gt = s.gt, span = false,
  }
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
    -- A read is decided as a request that counts nothing.
    p.defer = p.defer or p.read
  end
  return p
end

-- limitOf parses the arguments of a limit, which start at ARGV[a0 + o],
-- at now: it returns its settings s, its p (s itself for the usual call
-- without a calendar unit), the units its call asks for and the offset
-- of the next limit's arguments; or nil and an error reply when the
-- arguments are malformed.
local function limitOf(ARGV, a0, o, now)
  local s = settings(ARGV[a0 + o])
  if s == nil then
    return nil, redis.error_reply('ERR gateway script: bad settings ' .. tostring(ARGV[a0 + o]))
  end
  local call = ARGV[a0 + o + 1]
  local p = s
  if call ~= '' or s.cal then
    p = callOf(s, call)
    if p.err then
      return nil, p
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
      return nil, redis.error_reply('ERR gateway script: Redis\'s clock is more than a calendar window away from the gateway\'s')
    end
    p.id = p.id .. '/' .. p.cal.id
  end
  return s, p, units, o
end

-- algorithmOf returns the algorithm of p, of settings s, the first time
-- the settings are used (p.a has it after that): its chunk (A) runs once.
-- It returns nil and an error reply for an algorithm the script does not
-- have.
local function algorithmOf(p, s)
  local a = A[p.alg]
  if a == nil then
    return nil, redis.error_reply('ERR gateway script: unknown algorithm ' .. p.alg)
  end
  if type(a) == 'function' then
    a = a()
    A[p.alg] = a
  end
  p.a, s.a = a, a
  return a
end

-- namesOf returns the names of the fields a hash key of limit p (of
-- algorithm a) is read with at now (load, redis_state.lua): the store's,
-- the shape, the end of a lockout and the instant the key expires; then
-- the algorithm's (a.fields); then the rest of the store's: when a token
-- beyond its request was last leased (µs), the units held and until when
-- they are, and the end of its queue. They are made once for each table
-- the algorithm's fields returns (own.names), which nothing changes.
local function namesOf(p, a, now)
  if p.limit <= 0 then
    return NOFIELDS.names
  end
  local own = a.fields(p, now)
  local names = own.names
  if not names then
    names = { '_id', '_lk', '_x' }
    for j = 1, #own do
      names[3 + j] = own[j]
    end
    local m = #names
    names[m + 1], names[m + 2], names[m + 3], names[m + 4] = '_lt', '_h', '_hx', '_a'
    own.names = names
  end
  return names
end

-- keyBudget applies the key budget (budget.lua) to limit i of the call
-- whose arguments end at ARGV[top], whose counter does not exist yet: a
-- new caller's (every counter has "_id"). It returns nil when the counter
-- may be created (joining counts it until it is); else the overflow
-- counter to count on instead.
local function keyBudget(ARGV, top, i)
  local cap, over = budget(ARGV, top, i)
  if not cap then
    return nil
  end
  if room(cap, joining) then
    joining = joining + 1
    return nil
  end
  return over
end

-- A new key's usual call (cost 1, decide and count, no lease) gets at
-- one instant what every other new key of its settings gets then: the
-- same fields, time to live and reply. So the first such call of a batch
-- (one instant, many) is decided, and its key kept as the template of
-- its settings (remember); the next new keys are copies of it (COPY, which
-- makes nothing when the key exists), at the cost of one command and no
-- decision: the one decision made once, not another way to decide. A
-- template written again is dropped (save, redis_state.lua). newcomer is
-- the settings of the call being decided when it is a new key's usual
-- call, else false (decideLimit).
local newcomer = false

-- remember keeps key, a newcomer's of settings s (limit 1) counted at now
-- with the reply out, as the template of s.
local function remember(s, key, now, out)
  local spaced = arg(out[1])
  for j = 2, 9 do
    spaced = spaced .. ' ' .. arg(out[j])
  end
  local f = { now = now, slack = slack, key = key, spaced = spaced .. ' 0' }
  s.first, TEMPLATE[key] = f, f
end

-- again makes key, of a call of one limit (of settings s, whose arguments follow
-- ARGV[a0] and end at ARGV[top]) a copy of the template of s at now, if
-- there is one, the key does not exist and the key budget has room for
-- it as this script call knows; and returns the reply, as the string many
-- answers with (the template's, on its own counter). Otherwise it returns
-- nil, and the call is decided (decideAt).
local function again(ARGV, a0, top, key, s, now)
  local f = s.first
  if not f or TEMPLATE[f.key] ~= f or f.now ~= now or f.slack ~= slack then
    return nil
  end
  local cap = budget(ARGV, top, 1)
  if cap and not room(cap, 0, true) then
    return nil
  end
  local copied = redis.pcall('COPY', f.key, key)
  if copied ~= 1 then
    if copied ~= 0 then
      -- COPY refused (an ACL, or Redis before 6.2).
      TEMPLATE[f.key] = nil
    end
    return nil
  end
  made()
  return f.spaced
end

-- newcomerAt is again for a call of one limit of a batch (many), the
-- only script call with more than one call to copy a template to, whose
-- key is key and whose arguments follow ARGV[a0] and end at ARGV[top], at
-- at, Redis's clock, before anything else is done for it: when the call
-- is the usual one ("") and its settings have a template, it returns the
-- reply (again); otherwise nil.
local function newcomerAt(key, ARGV, a0, top, at)
  if ARGV[a0 + 3] ~= '' then
    return nil
  end
  local s = SETTINGS[ARGV[a0 + 2]]
  if not s or not s.first or s.cal then
    return nil
  end
  return again(ARGV, a0, top, key, s, instant(ARGV, a0, at))
end

-- keyState returns what limit i's key (p of settings s) holds beyond
-- the algorithm's state, at now: the end of its lockout, its expiry, its
-- units held and the end of its queue ("_a"); it sets LT[i], when its
-- tokens were last leased, for a call other than the usual one (decideRead
-- sets it for a usual call denied).
local function keyState(i, p, s, now)
  local v = V[i]
  local lk, x, held, ahead = 0, 0, 0, 0
  LT[i] = nil
  if VK[i] then
    lk, x = v._lk and num(v._lk) or 0, v._x and num(v._x) or 0
    if p ~= s then
      LT[i] = tonumber(v._lt)
    end
    if (tonumber(v._hx) or 0) > now then
      held = tonumber(v._h) or 0
    end
    ahead = tonumber(v._a) or 0
  end
  return lk, x, held, ahead
end

-- reshape starts limit i's key afresh, a counter that changed shape (a
-- reload changed its algorithm, window or precision), keeping its
-- lockout lk (in progress, or ended but in force again if the clock
-- steps back, as in memory). It returns the expiry, units held and end of
-- the queue left.
local function reshape(i, key, p, lk, now)
  rcall('DEL', key)
  V[i], VK[i], X[i], LT[i] = {}, false, 0, nil
  if p.lock > 0 and lk > 0 then
    save(i, p, { '_lk', lk }, max(lk, now), now)
  end
  return X[i], 0, 0
end

-- lift ends what no longer holds on limit i's key, of p: a lockout the
-- rule no longer has, and a queue that has ended. It returns the end of
-- the lockout and of the queue left.
local function lift(i, p, lk, ahead, now)
  if p.lock == 0 and lk > 0 then
    unset(i, now, '_lk')
    lk = 0
  end
  if ahead > 0 and ahead <= now then
    if lk == 0 and V[i]._lk then
      unset(i, now, '_a', '_lk')
    else
      unset(i, now, '_a')
    end
    ahead = 0
  end
  return lk, ahead
end

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

-- decideRead decides limit i (p of settings s, algorithm a) on key,
-- whose fields are read (V[i]), for units units at now, or at the end of
-- its queue, and keeps what the acts that follow need (P, R, L, X, H,
-- AH, U, HO and LT of i). It writes only what the key needs before it
-- can be decided (reshape, lift).
local function decideRead(i, key, p, s, a, units, now)
  local lk, x, held, ahead = keyState(i, p, s, now)
  local id = V[i]._id
  if id and id ~= p.id then
    x, held, ahead = reshape(i, key, p, lk, now)
  end
  lk, ahead = lift(i, p, lk, ahead, now)
  local r, ho = decideKey(key, p, a, V[i], held, lk, units, max(now, ahead))
  if p == s and not r.ok and VK[i] then
    -- When the key's tokens were last leased: the gateway may wait for
    -- them to come back.
    LT[i] = tonumber(V[i]._lt)
  end
  if p ~= s then
    p.units = units
  end
  P[i], R[i], L[i], X[i], H[i] = p, r, lk, x, held
  AH[i], U[i], HO[i] = ahead, units, ho
end

-- decideLimit reads and decides limit i of a call of n limits (decideAt),
-- whose arguments follow ARGV[a0] and end at ARGV[top], at now; the
-- limit's own start at ARGV[a0 + o]. It returns the offset of the next
-- limit's arguments, and a malformed argument's error reply as a second
-- result.
local function decideLimit(ARGV, a0, top, n, i, o, now)
  local s, p, units
  s, p, units, o = limitOf(ARGV, a0, o, now)
  if not s then
    return o, p
  end
  local a, bad = p.a, nil
  if not a then
    a, bad = algorithmOf(p, s)
    if not a then
      return o, bad
    end
  end
  local key = K[i]
  local names = hashed(p) and namesOf(p, a, now)
  load(i, key, p, names)
  if not VK[i] then
    local over = keyBudget(ARGV, top, i)
    if over then
      key = over
      K[i] = key
      overflowed = overflowed + 1
      load(i, key, p, names)
    end
  end
  if n == 1 and p == s and not VK[i] and p.limit > 0 and not hashed(p) then
    newcomer = s
  end
  decideRead(i, key, p, s, a, units, now)
  return o
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
        TRY[i], TRYHO[i] = decideKey(K[i], p, p.a, V[i], H[i], L[i], U[i], x)
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
        fromQueue(r, AH[i] - now)
      end
    end
    if not r.ok and enforced(p) then
      allowed = false
    end
  end
  return now, allowed
end

-- settle returns the instant the call of n limits decided (R) at now is
-- counted at, and whether it is allowed: now when every enforced limit
-- admits it and no queue is ahead; else what the reservation finds
-- (reserve).
local function settle(n, now)
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
  return at, allowed
end
