-- sliding_log for the Redis store (redis.lua), as slState in
-- sliding_log.go: a ring of the instants of the last z admissions in fields
-- 0..z-1, oldest first from h, n of them used; and the spill, the
-- admissions that fell out of a full ring while in the window: xn of
-- them, the newest at xt. A decision reads O(log limit) fields (a binary
-- search), a commit writes one.
local M = {}

-- log says that the store keeps this state as a hash (redis_state.lua):
-- a call reads a few of its up to limit instants.
M.log = true

-- FIELDS is what fields returns: one table, which the store reads and
-- hangs the names it reads on (redis.lua).
local FIELDS = { 'h', 'n', 'z' }

function M.fields()
  return FIELDS
end

-- at returns the i-th instant from the oldest.
local function at(key, st, i)
  local j = st.h + i
  if j >= st.z then
    j = j - st.z
  end
  return tonumber(rcall('HGET', key, j))
end

-- view returns the instant a request at now is counted at, the index of
-- the first admission among the last limit that still counts then, and
-- the newest admission.
local function view(key, st, now, limit, w)
  if st.n == 0 then
    return now, 0, nil
  end
  local newest = at(key, st, st.n - 1)
  local t = max(now, newest)
  local lo, hi = st.n - min(st.n, limit), st.n
  while lo < hi do
    local mid = fdiv(lo + hi, 2)
    if at(key, st, mid) >= t - w then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return t, lo, newest
end

function M.decide(key, p, now, v)
  local st = { h = tonumber(v.h) or 0, n = tonumber(v.n) or 0, z = tonumber(v.z) or p.limit }
  local w = p.window
  local t, first, newest = view(key, st, now, p.limit, w)
  local counted = st.n - first
  if counted + p.cost <= p.limit then
    local u = 0
    if newest ~= nil then
      u = max(newest + w + 1 - now, 0)
    end
    return { ok = true, remaining = p.limit - counted - p.cost, reset = t + w + 1 - now, retry = 0, uncounted = u, st = st, t = t }
  end
  -- Denied: the request fits once the oldest counted+cost-limit of the
  -- counted admissions have aged out.
  local oldest = first + min(counted + p.cost - p.limit, counted) - 1
  return { ok = false, remaining = 0, reset = newest + w + 1 - now, retry = at(key, st, oldest) + w + 1 - now, st = st, t = t }
end

-- first returns the index of the first admission in lo..hi-1 (from the
-- oldest) at or after since, or hi when there is none.
local function first(key, st, lo, hi, since)
  while lo < hi do
    local mid = fdiv(lo + hi, 2)
    if at(key, st, mid) >= since then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return lo
end

-- spill returns the spill once counting cost admissions at t pushed out
-- of the ring, of size admissions once grown, what it cannot keep while
-- in the window (spillOut in sliding_log.go); nil when it did not change.
local function spill(key, st, size, t, w, cost)
  local drop = max(st.n + cost - size, 0)
  if drop == 0 then
    return nil
  end
  local x = rcall('HMGET', key, 'xn', 'xt')
  local xn, xt = tonumber(x[1]) or 0, tonumber(x[2]) or 0
  if xn > 0 and xt < t - w then
    xn = 0
  end
  local old = min(drop, st.n)
  local inw = old - first(key, st, 0, old, t - w) + (drop - old)
  if inw == 0 then
    return nil
  end
  if drop > old then
    xt = t
  else
    xt = at(key, st, old - 1)
  end
  return xn + inw, xt
end

-- over returns the admissions in the window of a request at now beyond
-- the limit (limit.Result's Over): those the ring holds there, and the
-- spill while it counts.
function M.over(key, p, now, v)
  local st = { h = tonumber(v.h) or 0, n = tonumber(v.n) or 0, z = tonumber(v.z) or p.limit }
  if st.n == 0 then
    return 0
  end
  local w = p.window
  local t = max(now, at(key, st, st.n - 1))
  local count = st.n - first(key, st, 0, st.n, t - w)
  local x = rcall('HMGET', key, 'xn', 'xt')
  local xn, xt = tonumber(x[1]) or 0, tonumber(x[2]) or 0
  if xn > 0 and xt >= t - w then
    count = count + xn
  end
  return max(count - p.limit, 0)
end

-- grow resizes the ring to size, keeping the admissions in order, in set.
-- It runs only after a reload raised the limit.
local function grow(key, st, size, set)
  if st.n > 0 then
    local f = {}
    for i = 0, st.n - 1 do
      f[#f + 1] = fmod(st.h + i, st.z)
    end
    local v = rcall('HMGET', key, unpack(f))
    for i = 1, st.n do
      put(set, i - 1, v[i])
    end
  end
  st.h, st.z = 0, size
end

function M.commit(key, p, now, r, set)
  local st = r.st
  -- The spill first: it reads the ring as Redis holds it.
  local xn, xt = spill(key, st, max(st.z, p.limit), r.t, p.window, p.cost)
  if st.z < p.limit then
    grow(key, st, p.limit, set)
  end
  if xn then
    put(set, 'xn', xn)
    put(set, 'xt', xt)
  end
  -- The ring keeps the last z of the cost admissions, all at r.t.
  for _ = 1, min(p.cost, st.z) do
    if st.n < st.z then
      st.n = st.n + 1
    else
      st.h = st.h + 1
      if st.h == st.z then
        st.h = 0
      end
    end
    local j = st.h + st.n - 1
    if j >= st.z then
      j = j - st.z
    end
    put(set, j, r.t)
  end
  put(set, 'h', st.h)
  put(set, 'n', st.n)
  put(set, 'z', st.z)
  return r.t + p.window + 1
end

return M
