-- The decision (after redis_short.lua; see redis.lua for the script's
-- contract and its files): each limit of a call, one after the other, has
-- its arguments parsed (limitOf), its key read (readFields, keyBudget,
-- keyState) and decided (decideRead, decideKey), which decideLimit does
-- in that order; then, when a limit denied or a queue is ahead, the
-- earliest instant every enforced limit admits the call within its wait
-- (settle, reserve). Nothing here counts a request: the acts that follow
-- (redis_acts.lua) write what was decided. The exceptions are the short
-- ways a call of one limit may take (usual, freshFor: redis_short.lua),
-- and what a key needs before it can be decided (a counter that changed
-- shape, a lockout lifted, a queue ended).

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
    burst = s.burst, warmup = s.warmup, lock = s.lock,
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
-- without a calendar unit), the units its call asks for, whether the call
-- is spelled "?", and the offset of the next limit's arguments; or nil
-- and an error reply when the arguments are malformed.
local function limitOf(ARGV, a0, o, now)
  local s = settings(ARGV[a0 + o])
  if s == nil then
    return nil, redis.error_reply('ERR gateway script: bad settings ' .. tostring(ARGV[a0 + o]))
  end
  local call = ARGV[a0 + o + 1]
  local probe = call == '?'
  if probe then
    call = ''
  end
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
  return s, p, units, probe, o
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

-- namesOf returns the algorithm's fields (own) of limit p at now, and the
-- names of the fields read: the store's first, the shape, the end of a
-- lockout and the instant the key expires; then the algorithm's (own, m
-- of them); then the store's that only some calls use (a usual call,
-- p == s, reads up to the algorithm's, the first 3 + m): when a token
-- beyond its request was last leased (µs), the units held and until when
-- they are, and the end of its queue. own is a table of the algorithm's,
-- made once; so are the names read (own.names), which nothing changes
-- either.
local function namesOf(p, a, now)
  if p.limit <= 0 then
    return NOFIELDS, NOFIELDS.names
  end
  local own = a.fields(p, now)
  local names = own.names
  if not names then
    names = { '_id', '_lk', '_x', unpack(own) }
    for j = 4, #names do
      names[j] = tostring(names[j])
    end
    local m = #names
    names[m + 1], names[m + 2], names[m + 3], names[m + 4] = '_lt', '_h', '_hx', '_a'
    own.names = names
  end
  return own, names
end

-- readFields returns the fields names of key that limit p (of settings
-- s, with m fields of its algorithm's) reads, as HMGET gives them: for
-- the usual call, up to the algorithm's. A probe (a call of one limit
-- spelled "?") reads nothing from a key that does not exist: exists says
-- whether it does when quick or copied asked (nil: not known), else it
-- asks.
local function readFields(key, p, s, names, m, probe, exists)
  if probe and p == s and p.limit > 0 and exists ~= true and (exists == false or present(key) == false) then
    return NOSTATE
  elseif p == s then
    return rcall('HMGET', key, unpack(names, 1, 3 + m))
  end
  return rcall('HMGET', key, unpack(names))
end

-- keyBudget applies the key budget (budget.lua) to limit i of the call
-- whose arguments follow ARGV[a0] and end at ARGV[top], on key, a counter
-- that does not exist yet: a new caller's (every counter has "_id"). It
-- returns nil when the counter may be created, which then joins the
-- budget's set once written (JOIN); else the overflow counter to count on
-- instead. qover is the overflow counter quick found for key already.
local function keyBudget(ARGV, a0, top, i, key, now, qover)
  local bset, bcap, bover = budget(ARGV, top, i)
  if not bset then
    return nil
  end
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
  return over
end

-- keyState returns what limit i's fields v (m of them its algorithm's,
-- p of settings s) say of key beyond the algorithm's state: the end of
-- its lockout, its expiry, its units held and the end of its queue
-- ("_a"); it sets LT[i], when its tokens were last leased.
local function keyState(i, key, p, s, v, m, now)
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
  return lk, x, held, ahead
end

-- reshape starts limit i's key afresh, a counter that changed shape (a
-- reload changed its algorithm, window or precision), keeping its
-- lockout lk (in progress, or ended but in force again if the clock
-- steps back, as in memory). It returns the state, expiry, units held
-- and end of the queue left.
local function reshape(i, key, p, lk, now)
  rcall('DEL', key)
  local x = 0
  LT[i] = nil
  if p.lock > 0 and lk > 0 then
    x = expiry(max(lk, now), p)
    rcall('HSET', key, '_id', p.id, '_lk', lk, '_x', x)
    rcall('PEXPIRE', key, ttl(x, now))
    FRESH[i] = false
  end
  return {}, x, 0, 0
end

-- lift ends what no longer holds on key, of limit p whose fields read are
-- v: a lockout the rule no longer has, and a queue that has ended, so
-- that the usual call may decide the key again. It returns the end of
-- the lockout and of the queue left.
local function lift(key, p, v, lk, ahead, now)
  if p.lock == 0 and lk > 0 then
    rcall('HDEL', key, '_lk')
    lk = 0
  end
  if ahead > 0 and ahead <= now then
    rcall('HDEL', key, '_a')
    if lk == 0 and v[2] then
      rcall('HDEL', key, '_lk')
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
-- whose fields read are v (own and m: the algorithm's, namesOf), for
-- units units at now, or at the end of its queue, and keeps what the
-- acts that follow need (P, R, L, X, H, ST, AH, U, HO, FRESH and LT of
-- i). It writes only what the key needs before it can be decided
-- (reshape, lift).
local function decideRead(i, key, p, s, a, own, v, m, units, now)
  local lk, x, held, ahead = keyState(i, key, p, s, v, m, now)
  local st = view(own, v)
  FRESH[i] = v[1] ~= p.id
  if v[1] and v[1] ~= p.id then
    st, x, held, ahead = reshape(i, key, p, lk, now)
  end
  lk, ahead = lift(key, p, v, lk, ahead, now)
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

-- decideLimit reads and decides limit i of a call of n limits (decideAt),
-- whose arguments follow ARGV[a0] and end at ARGV[top], at now; the
-- limit's own start at ARGV[a0 + o]. It returns the offset of the next
-- limit's arguments; and, for a call of one limit that a short way
-- decides (usual, freshFor), its reply as a second result: at, when not
-- nil, is Redis's clock read by many, which gets the reply of usual as
-- the string it answers with. exists and qover are what quick or copied
-- learned of the key of a call of one limit: whether it exists, and its
-- overflow counter. A malformed argument's error reply is returned as
-- a reply.
local function decideLimit(ARGV, a0, top, n, i, o, now, at, exists, qover)
  local s, p, units, probe
  s, p, units, probe, o = limitOf(ARGV, a0, o, now)
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
  TMPL[key] = nil
  local own, names = namesOf(p, a, now)
  OWNS[i] = own
  local m = #own
  local v = readFields(key, p, s, names, m, probe and n == 1, exists)
  if n == 1 and p == s and v[1] == s.id and not v[2] and s.lock == 0 and s.limit > 0 then
    return o, usual(key, s, a, own, v, now, at ~= nil)
  end
  JOIN[i] = false
  if not v[1] then
    local over = keyBudget(ARGV, a0, top, i, key, now, qover)
    if over then
      key = over
      TMPL[key] = nil
      K[i] = key
      overflowed = overflowed + 1
      v = readFields(key, p, s, names, m, false)
    end
  end
  if n == 1 and p == s and not v[1] and p.limit > 0 then
    -- The usual call on a new key, alone: what it writes and answers
    -- is the same for every new key of its settings at this instant.
    local f = freshFor(key, s, a, now)
    if f then
      create(f, key, JOIN[i], JOINMS[i], false)
      return o, f[overflowed + 1]
    end
  end
  decideRead(i, key, p, s, a, own, v, m, units, now)
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
