-- A counter's state (after redis.lua; see its top for the script's
-- contract and its files): how a limit's key is read (load) and written
-- (save). A key holds the store's fields and the algorithm's as one
-- string, a MessagePack map of names to values ({_id =
-- "sliding_window/1000000/10", _x = 1732890001000000, h = 1732890000,
-- t = 1, [7] = 1}), read with GET and written whole with SET … PX: two
-- commands for a call, whatever it does. A ring's slots are the fields named by
-- numbers, and an empty one is left out. Two kinds of key are hashes of
-- those fields instead, read a field at a time: the sliding log's, whose
-- log of up to limit instants a call reads a few of (sliding_log.lua);
-- and every key of settings spelled with " h", the layout of releases
-- before the string one, which gateways of both share during a rolling
-- upgrade (docs/fleet.md, "Upgrading"). A key found in the other layout
-- than its settings' is read whole and written in its settings' layout.

-- V holds, for each limit i of the call being decided, the fields of its
-- key as read and as written since (names are strings, a ring's slots
-- numbers), and VK how it is kept in Redis: false when it does not exist,
-- else "string" or "hash". A hash read a field at a time gets the fields
-- not read yet when they are looked up (lazy).
local V, VK = {}, {}

-- TEMPLATE maps the keys of this script call that newcomers may be copied
-- from (redis_decide.lua, again) to what they hold; a key written again
-- is taken out. Each script call starts it afresh (one, many); only a
-- batch (many, batching) has calls to copy them to.
local TEMPLATE, batching = {}, false

-- parse returns the fields of a counter's string, a MessagePack map
-- (cmsgpack: one C call, at a fraction of the cost of reading them from
-- text); a string that is not a counter's map (its shape, "_id", a
-- string), as no fields.
local function parse(s)
  local ok, v = pcall(cmsgpack.unpack, s)
  if ok and type(v) == 'table' and type(v._id) == 'string' then
    return v
  end
  return {}
end

-- whole returns the fields of a hash (HGETALL's pairs).
local function whole(h)
  local v = {}
  for j = 1, #h, 2 do
    local name = h[j]
    local b = string.byte(name, 1)
    if b and b >= 48 and b <= 57 then
      name = num(name) or name
    end
    v[name] = h[j + 1]
  end
  return v
end

-- lazy makes v, the fields read of the hash key, look up those not read
-- yet in Redis (HGET) the first time they are asked for; false when
-- absent.
local function lazy(v, key)
  return setmetatable(v, { __index = function(t, name)
    local x = rcall('HGET', key, name) or false
    rawset(t, name, x)
    return x
  end })
end

-- hashed reports whether the key of p is kept as a hash.
local function hashed(p)
  return p.hashed or p.a.log
end

-- load reads limit i's key, of p, into V[i] and VK[i]: a string whole;
-- a hash in its settings' layout, the fields names (namesOf,
-- redis_decide.lua) and the rest when asked (lazy); a key in the other
-- layout whole. A key named by an earlier limit of the call shares its
-- fields.
local function load(i, key, p, names)
  for j = 1, i - 1 do
    if K[j] == key then
      -- One key named twice in a call: one state, which each limit's
      -- acts write in turn.
      V[i], VK[i] = V[j], VK[j]
      return
    end
  end
  local h = hashed(p)
  local r
  if h then
    r = redis.pcall('HMGET', key, unpack(names))
  else
    r = redis.pcall('GET', key)
  end
  if type(r) == 'table' and r.err then
    -- The other layout (WRONGTYPE).
    if h then
      V[i], VK[i] = parse(rcall('GET', key)), 'string'
    else
      V[i], VK[i] = whole(rcall('HGETALL', key)), 'hash'
    end
  elseif h and r[1] then
    local v = {}
    for j = 1, #names do
      if r[j] then
        v[names[j]] = r[j]
      end
    end
    V[i], VK[i] = lazy(v, key), 'hash'
  elseif r and not h then
    V[i], VK[i] = parse(r), 'string'
  else
    V[i], VK[i] = {}, false
  end
end

-- flat returns the fields v as one string (parse), leaving out empty
-- slots.
local function flat(v)
  for name, value in pairs(v) do
    if type(name) == 'number' and (value == 0 or value == '0') then
      v[name] = nil
    end
  end
  return cmsgpack.pack(v)
end

-- save writes the fields of set (name, value, ...) to limit i's key, of
-- p, at now, with its shape, moving its expiry to cover upto if it does
-- not (expiry, redis.lua): the string whole, or a hash's fields set. A
-- key that did not exist counts in the key budget's size (made,
-- budget.lua).
local function save(i, p, set, upto, now)
  local v, key = V[i], K[i]
  if not VK[i] then
    made()
  end
  local x = max(X[i], v._x and num(v._x) or 0)
  if TEMPLATE[key] then
    TEMPLATE[key] = nil
  end
  for j = 1, #set, 2 do
    v[set[j]] = set[j + 1]
  end
  v._id = p.id
  local t = nil
  if upto > x then
    x = expiry(upto, p)
    X[i], v._x = x, x
    t = ttl(x, now)
  end
  if not hashed(p) then
    rcall('SET', key, flat(v), 'PX', arg(t or ttl(x, now)))
    VK[i] = 'string'
    return
  elseif VK[i] == 'hash' then
    set[#set + 1], set[#set + 2] = '_id', p.id
    if t then
      set[#set + 1], set[#set + 2] = '_x', x
    end
    for j = 1, #set do
      set[j] = arg(set[j])
    end
    local r = redis.pcall('HSET', key, unpack(set))
    if type(r) ~= 'table' or not r.err then
      if t then
        rcall('PEXPIRE', key, arg(t))
      end
      return
    end
    -- Written as a string since it was read: by an earlier limit of the
    -- call on the same key, under another shape.
  end
  -- A new hash, or one that was a string: every field that a hash can
  -- hold.
  rcall('DEL', key)
  local all = {}
  for name, value in pairs(v) do
    local k = type(value)
    if k == 'string' or k == 'number' then
      all[#all + 1], all[#all + 2] = arg(name), arg(value)
    end
  end
  rcall('HSET', key, unpack(all))
  rcall('PEXPIRE', key, arg(t or ttl(x, now)))
  VK[i] = 'hash'
end

-- unset takes the field name, and other if not nil, out of limit i's
-- key at now: a hash's, or the string written again without them (a
-- lockout lifted must stay lifted also when nothing else is written).
local function unset(i, now, name, other)
  local v = V[i]
  rawset(v, name, nil)
  if other then
    rawset(v, other, nil)
  end
  if VK[i] == 'hash' and other then
    rcall('HDEL', K[i], name, other)
  elseif VK[i] == 'hash' then
    rcall('HDEL', K[i], name)
  elseif VK[i] == 'string' then
    local x = v._x and num(v._x)
    if x then
      rcall('SET', K[i], flat(v), 'PX', arg(ttl(x, now)))
    end
  end
end
