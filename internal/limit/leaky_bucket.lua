-- leaky_bucket for the Redis store (redis.lua), as lbState in
-- leaky_bucket.go: the bucket is empty at d + f/n µs, where n is the limit
-- it was last counted with. gcra.lua comes before this.
local M = {}

-- FIELDS is what fields returns: one table, which the store reads and
-- hangs the names it reads on (redis.lua).
local FIELDS = { 'd', 'f', 'n' }

function M.fields()
  return FIELDS
end

-- nxt returns when the bucket is empty after a request of p.cost units
-- at now, given when it is empty now (dn, df; nil for a fresh bucket).
local function nxt(dn, df, now, p)
  if dn == nil or rcmp(dn, df, now, 0) < 0 then
    dn, df = now, 0
  end
  local tn, tf = intervals(p.cost, p)
  return radd(dn, df, tn, tf, p.limit)
end

function M.decide(key, p, now, v)
  -- When the bucket is empty, in p's denominator; nil for a fresh one.
  local dn, df
  local den = tonumber(v.n) -- HMGET gives false for a missing field
  if den ~= nil then
    dn, df = rescale(tonumber(v.d), tonumber(v.f), den, p.limit)
  end
  if dn ~= nil then
    local ok, r = gcracheck(dn, df, now, p)
    if not ok then
      r.dn, r.df = dn, df
      return r
    end
  end
  local u = untildue(dn, df, now)
  local nn, nf = nxt(dn, df, now, p)
  local d, f = rsub(nn, nf, now, 0, p.limit)
  return { ok = true, remaining = capacity(p) - spans(d, f, p), reset = rceil(d, f), retry = 0, uncounted = u, dn = dn, df = df }
end

-- over returns the level above a full bucket at now (limit.Result's
-- Over), from the fields v as decide gets them.
function M.over(key, p, now, v)
  local den = tonumber(v.n)
  if den == nil then
    return 0
  end
  local dn, df = rescale(tonumber(v.d), tonumber(v.f), den, p.limit)
  return gcraover(dn, df, now, p)
end

-- commit counts p.cost units, which decide may have decided for another
-- cost (a charge), from the bucket as decide found it.
function M.commit(key, p, now, r, set)
  local nn, nf = nxt(r.dn, r.df, now, p)
  put(set, 'd', nn)
  put(set, 'f', nf)
  put(set, 'n', p.limit)
  return rceil(nn, nf)
end

return M
