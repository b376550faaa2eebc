-- sliding_window for the Redis store (redis.lua), as swState in
-- sliding_window.go: a ring of precision+1 bucket counts in fields 0..P,
-- h the newest bucket counted into and t the total. Buckets are
-- ⌈window/precision⌉ µs wide and aligned to the Unix epoch. An admission
-- in the newest bucket changes three fields; one that moves on from it
-- also reads the buckets it moves past, and empties those that are not.
local M = {}

-- geometry returns the width of p's buckets and their number, and keeps
-- them in p.
local function geometry(p)
  local w = p.gw
  if not w then
    w = max(fdiv(p.window + p.precision - 1, p.precision), 1)
    p.gw, p.gn = w, p.precision + 1
  end
  return w, p.gn
end

-- slot returns the field of bucket b.
local function slot(b, n)
  return fmod(b, n)
end

-- counts returns the counts of buckets from..to (at most n of them)
-- that the fields v hold, indexed by bucket.
local function counts(v, from, to, n)
  local out = {}
  local s = slot(from, n)
  for j = from, to do
    local c = v[s]
    out[j] = c and num(c) or 0
    s = s + 1
    if s == n then
      s = 0
    end
  end
  return out
end

-- fields returns one table for all the calls of p in one bucket (p.gf,
-- for the slot p.gj, last worked out for the instant p.gt), which the
-- store reads and hangs the names it reads on (redis.lua).
function M.fields(p, now)
  if p.gt == now then
    return p.gf
  end
  local width, n = geometry(p)
  local j = slot(fdiv(now, width), n)
  if p.gj ~= j then
    p.gj, p.gf = j, { 'h', 't', j }
  end
  p.gt = now
  return p.gf
end

function M.decide(key, p, now, v)
  local width, n = geometry(p)
  local head, total = v.h and num(v.h) or 0, v.t and num(v.t) or 0
  local b = fdiv(now, width)
  -- Every field r may get, so that the table is made at its size once.
  local r = { head = head, total = total, b = b, cb = false, c = false, one = false, ok = false,
    remaining = 0, reset = 0, retry = 0, uncounted = 0, span = false }
  local sum = 0
  if total > 0 then
    if total == 1 and b > head then
      -- A total of 1 is mostly the head bucket's: every count goes into
      -- the head bucket (h). But tokens given back (lease_return.lua)
      -- may have emptied it, the count being then in an older bucket,
      -- which may have aged out: one (the head bucket holds the 1, and
      -- no other slot holds anything) is known only from its slot.
      local c = v[slot(head, n)]
      r.one = c and num(c) == 1 or false
    end
    if b <= head then
      -- Counted in the head bucket (b < head: a clock that stepped back).
      b = head
      r.b = b
      local c = v[slot(b, n)]
      r.cb = c and num(c) or 0
    end
    if b - head < n then
      sum = total
      -- The head bucket has not aged out: when it holds the one count
      -- (r.one), nothing else is to read.
      if b > head and not r.one then
        -- Bucket j shares its slot with bucket j-n, which has aged out.
        r.c = counts(v, head + 1, b, n)
        for j = head + 1, b do
          sum = sum - r.c[j]
        end
      end
    end
  end
  if sum + p.cost <= p.limit then
    r.ok, r.remaining, r.reset, r.retry = true, p.limit - sum - p.cost, (b + n) * width - now, 0
    -- Without this request, everything has aged out once the head
    -- bucket, which is never empty, has.
    r.uncounted = 0
    if sum > 0 then
      r.uncounted = (head + n) * width - now
    end
    return r
  end
  -- Denied: walk forward bucket by bucket until enough old buckets have
  -- aged out for one more request to fit.
  local all = counts(v, head - n + 1, head, n)
  r.ok, r.remaining, r.reset, r.retry = false, 0, (head + n) * width - now, 0
  local left = sum
  for k = 1, n do
    local j = b + k - n
    if j <= head then
      left = left - all[j]
    end
    if left + p.cost <= p.limit then
      r.retry = (b + k) * width - now
      break
    end
  end
  return r
end

-- over returns what the buckets a request at now is decided on hold
-- past the limit (limit.Result's Over), from the fields v as decide gets
-- them.
function M.over(key, p, now, v)
  local width, n = geometry(p)
  local head, total = v.h and num(v.h) or 0, v.t and num(v.t) or 0
  local b = fdiv(now, width)
  if total == 0 or b - head >= n then
    return 0
  end
  local sum = total
  if b > head then
    local c = counts(v, head + 1, b, n)
    for j = head + 1, b do
      sum = sum - c[j]
    end
  end
  return max(sum - p.limit, 0)
end

function M.commit(key, p, now, r, set)
  local width, n = geometry(p)
  local head, total, b = r.head, r.total, r.b
  local count = p.cost
  if total == 0 then
    -- Every slot is empty; any bucket may become the head.
  elseif b <= head then
    count = r.cb + p.cost
  elseif b - head >= n then
    if r.one then
      -- Only the head bucket's slot is not empty (decide).
      put(set, slot(head, n), 0)
    else
      for i = 0, n - 1 do
        put(set, i, 0)
      end
    end
    total = 0
  elseif r.c then
    -- The buckets moved past age out, and the slot of b with them; a
    -- slot that is empty already is not written.
    local c = r.c
    local s = slot(head + 1, n)
    for j = head + 1, b - 1 do
      if c[j] ~= 0 then
        total = total - c[j]
        put(set, s, 0)
      end
      s = s + 1
      if s == n then
        s = 0
      end
    end
    total = total - c[b]
  end
  put(set, slot(b, n), count)
  put(set, 'h', b)
  put(set, 't', total + p.cost)
  return (b + n) * width
end

-- left returns the time from now until the bucket that decide counts in
-- ends: a lease's tokens are good until then.
function M.left(p, now, r)
  local width = geometry(p)
  return (r.b + 1) * width - now
end

-- bucket returns the number of the bucket that decide's r counts in.
function M.bucket(p, r)
  return r.b
end

return M
