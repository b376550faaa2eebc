-- The GCRA arithmetic that token_bucket.lua and leaky_bucket.lua share, as
-- gcra.go: instants are exact rationals n + f/limit µs, held as two
-- numbers (n, f) with 0 ≤ f < limit, so that T = window/limit never
-- drifts and Retry-After never lies by a rounding.

local function rcmp(an, af, bn, bf)
  if an ~= bn then
    return an < bn and -1 or 1
  end
  if af ~= bf then
    return af < bf and -1 or 1
  end
  return 0
end

local function radd(an, af, bn, bf, den)
  local n, f = an + bn, af + bf
  if f >= den then
    n, f = n + 1, f - den
  end
  return n, f
end

local function rsub(an, af, bn, bf, den)
  local n, f = an - bn, af - bf
  if f < 0 then
    n, f = n - 1, f + den
  end
  return n, f
end

-- rceil returns the first whole µs at or after n + f/den.
local function rceil(n, f)
  if f > 0 then
    return n + 1
  end
  return n
end

-- capacity (redis.lua) is the bucket's capacity: burst, or limit when
-- burst is 0.

-- intervals returns k·window/limit: the time k requests take to refill or
-- drain.
local function intervals(k, p)
  return muldiv(k, p.window, p.limit)
end

-- spans returns ⌈d·limit/window⌉ for d = dn + df/limit ≥ 0: the level, in
-- requests, of a bucket that is d away from full (or empty).
local function spans(dn, df, p)
  local q, r = muldiv(dn, p.limit, p.window)
  r = r + df
  if r >= p.window then
    q, r = q + fdiv(r, p.window), fmod(r, p.window)
  end
  if r > 0 then
    q = q + 1
  end
  return q
end

-- rescale returns n + f/from with denominator to, rounded up: the limit of
-- a bucket changed (a reload).
local function rescale(n, f, from, to)
  if f == 0 or from == to then
    return n, f
  end
  local q, r = muldiv(f, to, from)
  if r > 0 then
    q = q + 1
  end
  if q >= to then
    return n + 1, q - to
  end
  return n, q
end

-- untildue returns the time from now until due = dn + df/limit, rounded
-- up, or 0 when due is nil (a fresh bucket) or not after now: the time
-- until a bucket is full (or empty) with nothing more counted.
local function untildue(dn, df, now)
  if dn == nil or rcmp(dn, df, now, 0) <= 0 then
    return 0
  end
  return rceil(dn, df) - now
end

-- gcracheck decides a request of p.cost units at now against a used
-- bucket whose debt runs until due = dn + df/limit: it is admitted while
-- due - (b-cost)·T ≤ now. It returns true, or false and the result of a
-- denial.
local function gcracheck(dn, df, now, p)
  local tn, tf = intervals(capacity(p) - p.cost, p)
  if rcmp(dn, df, now + tn, tf) <= 0 then
    return true
  end
  local rn, rf = rsub(dn, df, tn, tf, p.limit)
  return false, { ok = false, remaining = 0, reset = rceil(dn, df) - now, retry = rceil(rn, rf) - now }
end

-- gcraover returns how far a used bucket whose debt runs until due = dn +
-- df/limit is past full (or empty) at now beyond its capacity, in
-- requests rounded up: the units charges took past the limit.
local function gcraover(dn, df, now, p)
  if rcmp(dn, df, now, 0) <= 0 then
    return 0
  end
  local d, f = rsub(dn, df, now, 0, p.limit)
  return max(spans(d, f, p) - capacity(p), 0)
end
