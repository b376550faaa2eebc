-- The key budget of the Redis store (redis_budget.go), for the decision
-- (redis.lua): a request whose counter does not exist yet and that has an
-- overflow counter is counted against that instead when the membership
-- set of its slot holds its budget of live keys.
--
-- The budget's arguments come last in ARGV, after the decision's, so that
-- the decision never sees them: for each budgeted limit, its index in KEYS
-- and the Redis key of its overflow counter; then the membership set, the
-- budget, and the number of budgeted limits (ARGV[#ARGV], 0 for none).
-- The set and the overflow counters are in the slot of KEYS.
--
-- The set's members are the counters of new callers; a member's score is
-- an instant (ms, Redis's clock) at or before which its counter may have
-- expired: it is looked at again then (PTTL) and dropped once the counter
-- is gone. A new member is due at once, so that the next prune learns its
-- real expiry. Pruning runs only when the set is full. The budget costs
-- nothing for a counter that exists: the decision learns that from the
-- fields it reads anyway.

-- budget returns the budget's arguments of a call for limit i: {set, cap,
-- over = limit i's overflow counter}, or nil when i has none. It is read
-- only for a counter that does not exist yet.
local function budget(ARGV, i)
  local top = #ARGV
  local m = tonumber(ARGV[top])
  local base = top - 3 - 2 * m
  for j = 1, m do
    if tonumber(ARGV[base + 2 * j - 1]) == i then
      return { set = ARGV[top - 2], cap = tonumber(ARGV[top - 1]), over = ARGV[base + 2 * j], pruned = false }
    end
  end
  return nil
end

-- prune looks at up to 32 members of b's set that are due at ms, drops
-- those whose counter is gone and moves the others to their counter's
-- expiry.
local function prune(b, ms)
  b.pruned = true
  local due = redis.call('ZRANGEBYSCORE', b.set, '-inf', ms, 'LIMIT', 0, 32)
  for _, k in ipairs(due) do
    local left = redis.call('PTTL', k)
    if left == -2 then
      redis.call('ZREM', b.set, k)
    elseif left == -1 then
      -- Counters always expire; look again in a minute.
      redis.call('ZADD', b.set, ms + 60000, k)
    else
      redis.call('ZADD', b.set, ms + left, k)
    end
  end
end

-- room reports whether the counter key may be created under b at ms.
local function room(b, key, ms)
  if redis.call('ZCARD', b.set) < b.cap or redis.call('ZSCORE', b.set, key) then
    return true
  end
  if b.pruned then
    return false
  end
  prune(b, ms)
  return redis.call('ZCARD', b.set) < b.cap
end

-- newcaller makes key, a counter that does not exist yet, a member of b's
-- set and returns nil, or returns the overflow counter to count on
-- instead when the set holds its budget. now is the decision's instant
-- (µs); with fixed (a test's fixed instant) the set is on Redis's clock
-- all the same, as the counters' expiry is. A call's limits share one
-- set: pruned carries over from one to the next. arg turns a number into
-- a command's argument (redis.lua).
local function newcaller(b, key, now, fixed, arg)
  local ms
  if fixed then
    local t = redis.call('TIME')
    ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  else
    ms = math.floor(now / 1000)
  end
  if room(b, key, ms) then
    redis.call('ZADD', b.set, arg(ms), key)
    return nil
  end
  return b.over
end
