-- The short ways (after redis.lua; see its top for the script's contract
-- and its files): a usual call (cost 1, decide and count, no lease) of one
-- limit decided with less work than the decision's long way
-- (redis_decide.lua), with the same outcome. On a new key: quick (one
-- call, before anything else is read), copied (a batch, many), freshFor
-- and create (what every new key of a rule gets at one instant, made
-- once, and copied to the batch's next new keys: TMPL). On a key that
-- exists: usual, once the long way has read its fields.

-- NOSTATE is the fields of a key that does not exist, the algorithm's
-- and those decideAt reads: none. Nothing writes to it.
local NOSTATE = {}

-- freshFor returns what a usual call (cost 1, decide and count, no lease)
-- of s, settings without a calendar unit, does to a key that does not
-- exist, at now: the fields to write (set), the key's time to live
-- (ttln, in ms; ttl as an argument of PEXPIRE) and the reply, as decide
-- would make them for that key alone (f[1], and f[2] for a key sent to
-- its overflow counter; Redis only reads a reply, so one table serves
-- them all; with the reply as a string in s, see many); or false when such a call is denied, which decide then
-- decides. It depends on s and now only, so it is made once
-- per settings and instant (s.fresh): every new key of a batch (one
-- instant, many) after the first costs its two commands and no more.
-- key is the first such key, which the algorithm may read (it does not
-- exist).
local function freshFor(key, s, a, now)
  local f = s.fresh
  if f ~= false and f ~= nil and f.now == now and f.slack == slack then
    return f
  end
  f = false
  local r = a.decide(key, s, now, NOSTATE)
  if r.ok then
    local set = {}
    local idle = a.commit(key, s, now, r, set)
    put(set, '_id', s.id)
    local x = expiry(max(idle, 0), s)
    put(set, '_x', x)
    local t = ttl(x, now)
    f = { now = now, slack = slack, set = set, ttl = arg(t), ttln = t,
      { 1, 1, r.remaining, r.reset, r.retry, 0, 0, 0, -1, 0 },
      { 1, 1, r.remaining, r.reset, r.retry, 0, 0, 0, -1, 1 } }
    -- The same replies as one string each, which many answers with.
    local reply = string.format('1 1 %d %d %d 0 0 0 -1 ', r.remaining, r.reset, r.retry)
    f[1].s, f[2].s = reply .. '0', reply .. '1'
  end
  s.fresh = f
  return f
end

-- present asks Redis whether key exists: true or false, or nil when
-- EXISTS is refused (an ACL).
local function present(key)
  local e = redis.pcall('EXISTS', key)
  if e == 0 then
    return false
  elseif e == 1 then
    return true
  end
  return nil
end

-- TMPL maps each key that the short way created (create) in the script
-- call under way to its f (freshFor), as long as nothing else wrote it:
-- f.tmpl, the first of them for f, holds what every new key of f's
-- settings at f's instant gets, fields and expiry, and the next ones
-- are made by copying it (quick). A script call starts it afresh (begin):
-- a key of another script call may have changed since, or be in another
-- database. decideAt takes out every key it reads the long way, which
-- may write it.
local TMPL = {}

-- create makes key, a new key, what f (freshFor) says, as a copy of
-- f.tmpl when copy, else by writing it (the first such key becomes
-- f.tmpl), and makes it a member of the key budget's set bset, when not
-- nil, due when it expires (ms is the instant its expiry counts from,
-- newcaller). It reports false when COPY made nothing, and then whether
-- because key exists (true) or COPY is refused (false: an ACL).
local function create(f, key, bset, ms, copy)
  if copy then
    local e = redis.pcall('COPY', f.tmpl, key)
    if e ~= 1 then
      return false, e == 0
    end
  else
    rcall('HSET', key, unpack(f.set))
    rcall('PEXPIRE', key, f.ttl)
    if TMPL[f.tmpl] ~= f then
      f.tmpl = key
      TMPL[key] = f
    end
  end
  if bset then
    joined(bset, key, arg(ms + f.ttln))
  end
  return true
end

-- shortway returns the short way (freshFor) of the call whose arguments
-- follow ARGV[a0] when it is spelled "?" and its settings' short way is
-- worked out at now with slack sl; else nil.
local function shortway(ARGV, a0, now, sl)
  if ARGV[a0 + 3] ~= '?' then
    return nil
  end
  local s = SETTINGS[ARGV[a0 + 2]]
  local f = s and s.fresh
  if not f or f.now ~= now or f.slack ~= sl then
    return nil
  end
  return f
end

-- quick decides the usual call of one limit on key at now the short way,
-- before decideAt looks at anything else, when the call is spelled "?"
-- and its settings' short way at now is worked out already (freshFor:
-- not for the first new key of a batch): it returns the reply. The key
-- is a copy of the first such key of the script call (TMPL) when there
-- is one, else written anew. Otherwise it returns nil, and whether key
-- exists when it asked (nil when it did not). A key the key budget sends
-- to its overflow counter is left to decideAt, with that counter as the
-- third result; nothing is written then.
local function quick(key, ARGV, a0, top, now)
  local f = shortway(ARGV, a0, now, slack)
  if not f then
    return nil, nil
  end
  local copy = TMPL[f.tmpl] == f
  local bset, bcap, bover = budget(ARGV, top, 1)
  -- Without a copy to make, which tells whether key exists, ask first;
  -- and also when the budget may send key to its overflow counter, which
  -- only a key that does not exist may be (the key budget costs nothing
  -- for a counter that exists). An existing key, or EXISTS refused: decideAt
  -- reads it.
  if not copy or (bset and card(bset) >= bcap) then
    local e = present(key)
    if e ~= false then
      return nil, e
    end
  end
  local ms
  if bset then
    local over, pruned
    over, pruned, ms = newcaller(bset, bcap, bover, false, key, now, ARGV[a0 + 1] ~= '', 0)
    if over then
      -- decideAt counts it there, without asking the budget again.
      return nil, false, over
    end
  end
  local ok, found = create(f, key, bset, ms, copy)
  if not ok then
    return nil, found or nil
  end
  return f[1]
end

-- copied decides the usual call of one limit on key at now the shortest
-- way, for many: when the call is spelled "?", on Redis's clock, and its
-- settings' short way at now is worked out with a key of this script
-- call to copy (TMPL), and the key budget, if any, has room as this
-- script call knows it (CARD): it makes key a copy and returns the reply,
-- as the string many answers with. Otherwise it returns nil, and whether
-- it tried to copy, and then whether key exists (nil when COPY is
-- refused).
local function copied(key, ARGV, a0, top, now)
  if ARGV[a0 + 1] ~= '' then
    return nil, false
  end
  local f = shortway(ARGV, a0, now, 0)
  if not f or TMPL[f.tmpl] ~= f then
    return nil, false
  end
  local set, b = nil, ARGV[top]
  if b ~= '0' then
    b = BUDGETS[b]
    if not b then
      return nil, false
    end
    if b.over[1] then
      set = b.set
      local c = CARD[set]
      if not c or c >= b.cap then
        return nil, false
      end
    end
  end
  local ok, found = create(f, key, set, floor(now / 1000), true)
  if not ok then
    return nil, true, found or nil
  end
  return f[1].s
end

-- leasedAt returns when key's tokens were last leased (µs), or nil: what
-- a usual call does not read unless it is denied (decideAt).
local function leasedAt(key)
  return tonumber(rcall('HGET', key, '_lt'))
end

-- usual decides the usual call (cost 1, decide and count, no lease) of
-- one limit s, without a lockout or a calendar unit, on key, a counter of
-- its shape without a lockout, whose fields read (decideAt) are v, own
-- the algorithm's: what decideAt would, with less to keep track of; as
-- the string many answers with when spaced.
local function usual(key, s, a, own, v, now, spaced)
  local r = a.decide(key, s, now, view(own, v))
  if not r.ok then
    -- Nothing is written. When the key's tokens were last leased, which
    -- a usual call does not read otherwise: the gateway may wait for
    -- them to come back.
    local lt = leasedAt(key)
    return { 0, 0, r.remaining, r.reset, r.retry, 0, 0, 0, lt and now - lt or -1, 0 }
  end
  local set = {}
  local idle = a.commit(key, s, now, r, set)
  write(key, s, set, max(idle, 0), v[3] and num(v[3]) or 0, now)
  if spaced then
    return '1 1 ' .. arg(r.remaining) .. ' ' .. arg(r.reset) .. ' ' .. arg(r.retry) .. ' 0 0 0 -1 0'
  end
  return { 1, 1, r.remaining, r.reset, r.retry, 0, 0, 0, -1, 0 }
end
