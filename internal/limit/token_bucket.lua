-- token_bucket for the Redis store (redis.lua), as tbState in
-- token_bucket.go: the bucket is full at d + df/n µs and, with a warm-up,
-- its coldness as of then is c + cf/n µs, where n is the limit it was last
-- counted with. gcra.lua comes before this.
local M = {}

-- FIELDS is what fields returns: one table, which the store reads and
-- hangs the names it reads on (redis.lua).
local FIELDS = { 'd', 'df', 'c', 'cf', 'n' }

function M.fields()
  return FIELDS
end

-- view returns when the bucket is full and its coldness, in p's
-- denominator, or nil for a fresh bucket.
local function view(v, p)
  local den = tonumber(v.n)
  if den == nil then
    return nil
  end
  local st = {}
  st.dn, st.df = rescale(tonumber(v.d), tonumber(v.df), den, p.limit)
  st.cn, st.cf = rescale(tonumber(v.c), tonumber(v.cf), den, p.limit)
  return st
end

-- warmcost returns G(x) = ⌈2·(x - w/2)²/w⌉ µs for x > w/2, else 0.
local function warmcost(xn, xf, l, w)
  local d = xn + xf / l - w / 2
  if d <= 0 then
    return 0
  end
  return ceil(2 * d * d / w)
end

-- nxt returns due and the coldness after a request of p.cost units at now.
local function nxt(st, now, p)
  local l, w = p.limit, p.warmup
  local dn, df, cn, cf
  if st == nil then
    cn, cf = w, 0 -- a fresh bucket is full and cold
  else
    dn, df, cn, cf = st.dn, st.df, st.cn, st.cf
  end
  if dn == nil or rcmp(dn, df, now, 0) <= 0 then
    if st ~= nil and w > 0 then
      -- Full since due, and cooling since.
      local en, ef = rsub(now, 0, dn, df, l)
      cn, cf = radd(cn, cf, en, ef, l)
    end
    dn, df = now, 0
  end
  local tn, tf = intervals(p.cost, p)
  if w > 0 then
    local xn, xf = cn, cf
    if rcmp(xn, xf, w, 0) > 0 then
      xn, xf = w, 0
    end
    cn, cf = rsub(xn, xf, tn, tf, l)
    if cn < 0 then
      cn, cf = 0, 0
    end
    tn = tn + warmcost(xn, xf, l, w) - warmcost(cn, cf, l, w)
  end
  dn, df = radd(dn, df, tn, tf, l)
  return dn, df, cn, cf
end

-- warmremaining returns how many more requests a warming-up bucket d =
-- dn + df/limit away from full with coldness x admits, at most most; see
-- warmRemaining in token_bucket.go.
local function warmremaining(dn, df, xn, xf, most, p)
  local l, w = p.limit, p.warmup
  local gx = warmcost(xn, xf, l, w)
  if gx == 0 then
    return most
  end
  local toln, tolf = intervals(capacity(p) - 1, p)
  local lo, hi = 0, most
  while lo < hi do
    local mid = lo + fdiv(hi - lo + 1, 2)
    local sn, sf = intervals(mid - 1, p)
    local kn, kf = rsub(xn, xf, sn, sf, l)
    if kn < 0 then
      kn, kf = 0, 0
    end
    local bn, bf = radd(dn, df, sn, sf, l)
    bn = bn + gx - warmcost(kn, kf, l, w)
    if rcmp(bn, bf, toln, tolf) <= 0 then
      lo = mid
    else
      hi = mid - 1
    end
  end
  return lo
end

function M.decide(key, p, now, v)
  local st = view(v, p)
  local u = 0
  if st ~= nil then
    local ok, r = gcracheck(st.dn, st.df, now, p)
    if not ok then
      r.st = st
      return r
    end
    u = untildue(st.dn, st.df, now)
  end
  local nn, nf, cn, cf = nxt(st, now, p)
  local d, f = rsub(nn, nf, now, 0, p.limit)
  local remaining = max(capacity(p) - spans(d, f, p), 0)
  if p.warmup > 0 and remaining > 0 then
    remaining = warmremaining(d, f, cn, cf, remaining, p)
  end
  return { ok = true, remaining = remaining, reset = rceil(d, f), retry = 0, uncounted = u, st = st }
end

-- over returns the tokens owed below an empty bucket at now (limit.Result's
-- Over), from the fields v as decide gets them.
function M.over(key, p, now, v)
  local st = view(v, p)
  if st == nil then
    return 0
  end
  return gcraover(st.dn, st.df, now, p)
end

-- commit counts p.cost units, which decide may have decided for another
-- cost (a charge), from the bucket as decide found it.
function M.commit(key, p, now, r, set)
  local dn, df, cn, cf = nxt(r.st, now, p)
  put(set, 'd', dn)
  put(set, 'df', df)
  put(set, 'c', cn)
  put(set, 'cf', cf)
  put(set, 'n', p.limit)
  -- Idle once full and, with a warm-up, fully cold again.
  return rceil(dn, df) + max(p.warmup - cn, 0)
end

return M
