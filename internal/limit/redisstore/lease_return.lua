-- Gives a lease's unspent tokens back (redis_lease.go): KEYS[1] is the
-- counter, ARGV the counter's shape (its "_id", redis.lua), the bucket the
-- tokens were counted in (the script's number for it), and their number.
-- The count of that bucket goes down by them, but only while the counter
-- has that shape and the bucket still counts: fixed_window's window, or a
-- sliding_window bucket still in the ring. It returns the tokens given
-- back.
local key, id, b, n = KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local alg = string.match(id, '^[^/]+')
if alg == 'fixed_window' then
  local v = redis.call('HMGET', key, '_id', 'w', 'c')
  if v[1] ~= id or tonumber(v[2]) ~= b then
    return 0
  end
  local c = tonumber(v[3]) or 0
  n = math.min(n, c)
  if n > 0 then
    redis.call('HSET', key, 'c', c - n)
  end
  return n
elseif alg == 'sliding_window' then
  local precision = tonumber(string.match(id, '^[^/]+/[^/]+/([^/]+)'))
  local ring = precision + 1
  local slot = b - math.floor(b / ring) * ring
  local v = redis.call('HMGET', key, '_id', 'h', 't', slot)
  local h, t, cb = tonumber(v[2]), tonumber(v[3]) or 0, tonumber(v[4]) or 0
  if v[1] ~= id or h == nil or b > h or h - b >= ring then
    return 0
  end
  n = math.min(n, cb, t)
  if n > 0 then
    redis.call('HSET', key, slot, cb - n, 't', t - n)
  end
  return n
end
return 0
