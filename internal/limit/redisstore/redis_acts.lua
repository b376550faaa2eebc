-- The acts that follow the decision (after redis_decide.lua; see
-- redis.lua for the script's contract and its files): once every limit of
-- a call is decided (P, R and the rest of each limit i), act writes each
-- limit's key what its act and outcome ask (save, redis_state.lua): a charge counted whatever it costs (charge), units
-- held given back (release), a lockout begun (lockKey), units held
-- (hold), the request counted, with a lease (count, lease), or nothing
-- (uncounted); and it makes the call's reply.

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
    save(i, p, set, max(idle, L[i]), now)
    -- Decide afresh on what was written.
    r = p.a.decide(key, p, now, V[i])
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

-- release gives back limit i's units held (limit.Release), as many as
-- its call asks for.
local function release(i, now)
  if H[i] > 0 then
    save(i, P[i], { '_h', max(H[i] - P[i].units, 0) }, 0, now)
  end
end

-- lockKey locks limit i's key out at now, when it denied the call and
-- its rule locks out (not for a shadow, a key locked out already, or a
-- denial only for units held or for its queue): it returns r, the
-- limit's result, as the lockout makes it.
local function lockKey(i, now, r)
  local p = P[i]
  if p.lock > 0 and not p.shadow and L[i] <= now and not HO[i] then
    local lk = now + p.lock
    save(i, p, { '_lk', lk }, lk, now)
    r = lockout(r, p.lock)
  end
  return r
end

-- hold holds limit i's units (limit.Hold) at now, not counted, for
-- HOLD_TTL after the last hold: Remaining is what the held units leave.
local function hold(i, now)
  local p, r = P[i], R[i]
  local hx = now + HOLD_TTL
  save(i, p, { '_h', H[i] + p.cost, '_hx', hx }, hx, now)
  r.reset = r.uncounted
end

-- lease makes the usual count of limit p at now, admitted with result r,
-- a lease: p.cost becomes what the rate uses in the next 15ms or until
-- the bucket ends (r.span), beyond what the gateway holds, within the
-- room left (r.remaining + 1 with this request) / (2 × fleet). Tokens the
-- gateway stops using come back (lease_return.lua).
local function lease(p, r, now)
  r.span = p.a.left(p, now, r)
  local room = r.remaining + 1
  local want = ceil(abs(p.rate) * min(r.span, 15000) / 1000000) - p.have
  p.cost = max(min(want, fdiv(room, 2 * max(p.fleet, 1)), room), 1)
  r.remaining = r.remaining - (p.cost - 1)
end

-- count counts limit i's request, admitted, at the instant reserved
-- (at), or at the end of its own queue for a shadow behind one, and with
-- a lease (lease) when its call asks for one and it is counted now.
local function count(i, now, at)
  local p, r, key = P[i], R[i], K[i]
  local ci = max(at, AH[i])
  if p.limit > 0 and p.rate ~= 0 and p.cost == 1 and p.a.left and ci == now then
    lease(p, r, now)
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
    save(i, p, set, max(idle, L[i]), now)
  end
end

-- act writes what the call of n limits decided at now asks of each
-- limit's key, the call counted at at when allowed, and returns the
-- reply (see the top of redis.lua).
local function act(n, now, at, allowed)
  local out = { allowed and 1 or 0, nil, nil, nil, nil, nil, nil, nil, nil, nil }
  local no = 1
  for i = 1, n do
    local p, r = P[i], R[i]
    if p.charge then
      r = charge(K, i, now)
    elseif p.release then
      release(i, now)
    elseif not r.ok then
      r = lockKey(i, now, r)
    elseif allowed and p.hold and p.limit > 0 then
      hold(i, now)
    elseif allowed and not p.defer and not p.hold then
      count(i, now, at)
    elseif r.remaining >= 0 then
      -- Decided as if counted; it was not.
      r.remaining = r.remaining + p.cost
      r.reset = r.uncounted
    end
    if p.read and allowed and at == now and AH[i] > now then
      -- Decided at its key's queue's end (a refused call's reserve
      -- made it run from now).
      fromQueue(r, AH[i] - now)
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
    if p.read and p.limit > 0 then
      -- A read leases nothing: its slots say what the key holds past
      -- the limit, at the instant it was decided at, and the units held.
      out[no + 5] = p.a.over(K[i], p, max(now, AH[i]), V[i])
      out[no + 6] = H[i]
    end
    out[no + 7] = r.span and p.a.bucket(p, r) or 0
    out[no + 8] = LT[i] and now - LT[i] or -1
    no = no + 8
  end
  out[no + 1] = overflowed
  if newcomer and allowed and batching then
    remember(newcomer, K[1], now, out)
  end
  return out
end
