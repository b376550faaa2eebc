-- The entry points (after redis_acts.lua; see redis.lua for the script's
-- contract and its files): one call (decideAt: each limit decided, the
-- reservation and the acts), run alone (decide,
-- a script's entry) or in a batch (many); and entry, the library's one
-- function, which picks between them. The last line is replaced by the
-- script's entry (script.go) or the library's registration
-- (functions.go).

-- decideAt is one call: its n keys are those of KEYS after the first k0,
-- and its arguments (as described at the top of redis.lua) those of ARGV
-- after the first a0, up to ARGV[top]. at, when not nil, is Redis's clock
-- already read for it (many, below).
local function decideAt(KEYS, ARGV, at, k0, a0, n, top)
  local now = instant(ARGV, a0, at)
  overflowed, joining, newcomer = 0, 0, false
  for i = 1, n do
    K[i] = KEYS[k0 + i]
  end
  local o = 2
  for i = 1, n do
    local r
    o, r = decideLimit(ARGV, a0, top, n, i, o, now)
    if r then
      return r
    end
  end
  local t, allowed = settle(n, now)
  return act(n, now, t, allowed)
end

-- failed returns the reply of a call that raised r: a Redis error (a
-- table with err) or Lua's (a string).
local function failed(r)
  if type(r) ~= 'table' or r.err == nil then
    return redis.error_reply('ERR gateway script: ' .. tostring(r))
  end
  return r
end

-- one is one call: its n keys are the first of KEYS, its arguments those
-- of ARGV after the first a0 (as described at the top of redis.lua).
local function one(KEYS, ARGV, a0, n)
  begin()
  TEMPLATE, batching = {}, false
  local ok, r = pcall(decideAt, KEYS, ARGV, nil, 0, a0, n, #ARGV)
  if not ok then
    return failed(r)
  end
  return r
end

-- counted reports whether r, the reply of a call of n limits, tells that
-- the call may have written something that running it again would write
-- again: an admission, or a charge or a release, which count whatever
-- the decision (P holds the call's limits once its acts have run). A
-- denial answered before them (the usual call's) and an error write
-- nothing worth keeping; a lockout that began is not begun again.
local function counted(r, n)
  if type(r) == 'string' then
    return string.byte(r, 1) == 49
  elseif r.err ~= nil then
    return false
  elseif r[1] == 1 then
    return true
  end
  for i = 1, n do
    local p = P[i]
    if p and (p.charge or p.release) then
      return true
    end
  end
  return false
end

-- many is several calls in one (a batch of calls to one node, batch.go):
-- ARGV[1] is "*", ARGV[2] the number of calls m, then for each call the
-- number of its keys and of its arguments; or ARGV[1] is "=", ARGV[2] m,
-- and ARGV[3] and ARGV[4] the number of keys and of arguments of every
-- call; or ARGV[1] is "&", as "=" for calls whose arguments are the same
-- too (those of one rule, whose keys differ), which come once. Then come
-- the keys of every call, one call's after the other, in KEYS, and their
-- arguments likewise in ARGV (once for "&"). Each call is decided as
-- decide decides it alone, one after the other, on one reading of
-- Redis's clock; the reply holds each call's reply, or its error, in
-- their order: the reply of a call of one limit as one string of its
-- numbers separated by spaces (Redis turns a table of numbers into its
-- reply at several times the cost of a string), of several limits as a
-- table of numbers. A batch in one script is atomic, which is at least
-- what one script per call gives. The batch's arguments follow the first
-- b of ARGV (its memo's, see once); wrote tells whether a call of it
-- counted something (counted), when b > 0.
local function many(KEYS, ARGV, b)
  begin()
  TEMPLATE, batching = {}, true
  local m = num(ARGV[b + 2])
  local out = {}
  local shared = ARGV[b + 1] == '&'
  local same = shared or ARGV[b + 1] == '='
  local k, a, nk, na = 0, b + 2 + 2 * m, nil, nil
  if same then
    a, nk, na = b + 4, num(ARGV[b + 3]), num(ARGV[b + 4])
  end
  local wrote = false
  local now = clock()
  for c = 1, m do
    if not same then
      nk, na = num(ARGV[b + 1 + 2 * c]), num(ARGV[b + 2 + 2 * c])
    end
    local ok, r = true, nil
    if nk == 1 then
      r = newcomerAt(KEYS[k + 1], ARGV, a, a + na, now)
    end
    if not r then
      ok, r = pcall(decideAt, KEYS, ARGV, now, k, a, nk, a + na)
    end
    if not ok then
      r = failed(r)
    elseif b > 0 and not wrote then
      wrote = counted(r, nk)
    end
    if type(r) == 'string' then
      -- A newcomer's reply, as a string already (again).
    elseif r.err == nil and #r == 10 then
      -- One limit's reply, as a string too.
      r = arg(r[1]) .. ' ' .. arg(r[2]) .. ' ' .. arg(r[3]) .. ' ' .. arg(r[4]) .. ' ' .. arg(r[5]) .. ' ' ..
        arg(r[6]) .. ' ' .. arg(r[7]) .. ' ' .. arg(r[8]) .. ' ' .. arg(r[9]) .. ' ' .. arg(r[10])
    end
    out[c] = r
    k = k + nk
    if not shared then
      a = a + na
    end
  end
  return out, wrote
end

-- A call that counts runs once, however often the gateway sends it
-- (docs/fleet.md, "A call Redis ran runs once"): when its connection
-- closes before the reply comes, the gateway cannot tell whether Redis
-- ran it, and sends it again on another. Such a call comes with ARGV[1]
-- "!" (or "!!" when sent again), ARGV[2] the life of its memo (ms),
-- ARGV[3] its ID, then the call's own arguments (a call, or a batch:
-- many); the key of the hash of its memo is the last of KEYS, in the
-- slot of the call's keys ("gw:{tag}#done:life:period", memo.go). When
-- the call counts something (counted), its reply is kept there, packed
-- by cmsgpack (one C call, whatever the reply), as the field of its ID,
-- and the hash's expiry is moved to two lives ahead unless it is later
-- already (keep). A call sent again answers the reply kept, if there is
-- one, and decides nothing; only it reads the memo. A batch keeps one
-- memo: it runs whole or not at all.

-- keep makes key, a hash, live at least ms more: PEXPIRE GT (Redis 7),
-- else, when that did not move it (a new hash has no expiry, which GT
-- counts as later than any) or Redis has no GT, by its PTTL.
local function keep(key, ms)
  if redis.pcall('PEXPIRE', key, ms, 'GT') == 1 then
    return
  end
  local left = rcall('PTTL', key)
  if left == -1 or left < num(ms) then
    rcall('PEXPIRE', key, ms)
  end
end

-- once runs the call (or batch) of ARGV after its memo's arguments, as
-- described above, at most once.
local function once(KEYS, ARGV)
  local key = KEYS[#KEYS]
  if ARGV[1] == '!!' then
    local kept = rcall('HGET', key, ARGV[3])
    if kept then
      return cmsgpack.unpack(kept)
    end
  end
  local r, wrote
  if ARGV[4] == '*' or ARGV[4] == '=' or ARGV[4] == '&' then
    r, wrote = many(KEYS, ARGV, 3)
  else
    r = one(KEYS, ARGV, 3, #KEYS - 1)
    wrote = counted(r, #KEYS - 1)
  end
  if wrote then
    rcall('HSET', key, ARGV[3], cmsgpack.pack(r))
    keep(key, arg(2 * num(ARGV[2])))
  end
  return r
end

-- decide is the script's entry, and entry the library's function
-- (functions.go): many calls when ARGV[1] is "*", "=" or "&", a call kept
-- once when it is "!" or "!!" (once), else one call.
local function decide(KEYS, ARGV)
  bind()
  local mark = ARGV[1]
  if mark == '*' or mark == '=' or mark == '&' then
    return many(KEYS, ARGV, 0)
  elseif mark == '!' or mark == '!!' then
    return once(KEYS, ARGV)
  end
  return one(KEYS, ARGV, 0, #KEYS)
end
local entry = decide
--ENTRY--
