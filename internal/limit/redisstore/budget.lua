-- The key budget of the Redis store (redis_budget.go), run before the
-- decision (redis.lua): a request whose counter does not exist yet and
-- that has an overflow counter is counted against that instead when the
-- membership set of its slot holds its budget of live keys.
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
-- real expiry. Pruning runs only when the set is full.
--
-- A limit sent to its overflow counter gets that key in KEYS, and
-- overflowed counts them for the reply.
local overflowed = 0
-- clock is Redis's TIME reply, once read: by the budget when a counter is
-- new, else by the decision (redis.lua), so that a call reads it once.
local clock
do
  local top = #ARGV
  local m = tonumber(ARGV[top])
  if m > 0 then
    local set, cap = ARGV[top - 2], tonumber(ARGV[top - 1])
    -- ms is Redis's clock in ms, read only when a counter is new.
    local ms
    local pruned = false
    -- prune looks at up to 32 members that are due, drops those whose
    -- counter is gone and moves the others to their counter's expiry.
    local function prune()
      pruned = true
      local due = redis.call('ZRANGEBYSCORE', set, '-inf', ms, 'LIMIT', 0, 32)
      for _, k in ipairs(due) do
        local left = redis.call('PTTL', k)
        if left == -2 then
          redis.call('ZREM', set, k)
        elseif left == -1 then
          -- Counters always expire; look again in a minute.
          redis.call('ZADD', set, ms + 60000, k)
        else
          redis.call('ZADD', set, ms + left, k)
        end
      end
    end
    -- room reports whether the counter key may be created.
    local function room(key)
      if redis.call('ZCARD', set) < cap or redis.call('ZSCORE', set, key) then
        return true
      end
      if pruned then
        return false
      end
      prune()
      return redis.call('ZCARD', set) < cap
    end
    local base = top - 3 - 2 * m
    for j = 1, m do
      local i = tonumber(ARGV[base + 2 * j - 1])
      local key = KEYS[i]
      if redis.call('EXISTS', key) == 0 then
        if not ms then
          clock = redis.call('TIME')
          ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
        end
        if room(key) then
          redis.call('ZADD', set, ms, key)
        else
          KEYS[i] = ARGV[base + 2 * j]
          overflowed = overflowed + 1
        end
      end
    end
  end
end
