-- Gives a lease's unspent tokens back (giveBack, lease.go): KEYS[1] is the
-- counter, ARGV the counter's shape (its "_id", redis_state.lua), the
-- bucket the tokens were counted in (the script's number for it), and
-- their number. The count of that bucket goes down by them, but only
-- while the counter has that shape and the bucket still counts:
-- fixed_window's window, or a sliding_window bucket still in the ring. It
-- returns the tokens given back. The counter is a string of its fields
-- (a MessagePack map), or a hash of them (redis_state.lua), and stays
-- what it is.
local key, id, b, n = KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local v, hash = {}, false
local s = redis.pcall('GET', key)
if s == false then
  return 0
elseif type(s) == 'string' then
  local ok, m = pcall(cmsgpack.unpack, s)
  if not ok or type(m) ~= 'table' then
    return 0
  end
  v = m
else
  hash = true
  local h = redis.call('HGETALL', key)
  for j = 1, #h, 2 do
    v[tonumber(h[j]) or h[j]] = h[j + 1]
  end
end
if v._id ~= id then
  return 0
end
local set
local alg = string.match(id, '^[^/]+')
if alg == 'fixed_window' then
  if tonumber(v.w) ~= b then
    return 0
  end
  local c = tonumber(v.c) or 0
  n = math.min(n, c)
  set = { 'c', c - n }
elseif alg == 'sliding_window' then
  local precision = tonumber(string.match(id, '^[^/]+/[^/]+/([^/]+)'))
  local ring = precision + 1
  local slot = b - math.floor(b / ring) * ring
  local h, t, cb = tonumber(v.h), tonumber(v.t) or 0, tonumber(v[slot]) or 0
  if h == nil or b > h or h - b >= ring then
    return 0
  end
  n = math.min(n, cb, t)
  set = { slot, cb - n, 't', t - n }
else
  return 0
end
if n <= 0 then
  return 0
end
if hash then
  redis.call('HSET', key, unpack(set))
  return n
end
for j = 1, #set, 2 do
  v[set[j]] = set[j + 1]
end
-- The string again, without its empty slots, and with the time it had
-- left to live.
for name, value in pairs(v) do
  if type(name) == 'number' and tonumber(value) == 0 then
    v[name] = nil
  end
end
local pttl = redis.call('PTTL', key)
if pttl > 0 then
  redis.call('SET', key, cmsgpack.pack(v), 'PX', pttl)
else
  redis.call('SET', key, cmsgpack.pack(v))
end
return n
