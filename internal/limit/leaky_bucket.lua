-- leaky_bucket for the Redis store (redis.lua), as lbState in
-- leaky_bucket.go: the bucket is empty at d + f/n µs, where n is the limit
-- it was last counted with. gcra.lua comes before this.
local M = {}

function M.fields()
  return { 'd', 'f', 'n' }
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
      return r
    end
  end
  local u = untildue(dn, df, now)
  if dn == nil or rcmp(dn, df, now, 0) < 0 then
    dn, df = now, 0
  end
  local tn, tf = intervals(1, p)
  local nn, nf = radd(dn, df, tn, tf, p.limit)
  local d, f = rsub(nn, nf, now, 0, p.limit)
  return { ok = true, remaining = capacity(p) - spans(d, f, p), reset = rceil(d, f), retry = 0, uncounted = u, n = nn, f = nf }
end

function M.commit(key, p, now, r, set)
  put(set, 'd', r.n)
  put(set, 'f', r.f)
  put(set, 'n', p.limit)
  return rceil(r.n, r.f)
end

return M
