-- fixed_window for the Redis store (redis.lua), as fwState in
-- fixed_window.go: fields w (the window counted in: its number, or the
-- start of a calendar window; see span in redis.lua) and c (its count).
local M = {}

-- FIELDS is what fields returns: one table, which the store reads and
-- hangs the names it reads on (redis.lua).
local FIELDS = { 'w', 'c' }

function M.fields()
  return FIELDS
end

function M.decide(key, p, now, v)
  local sw, sc = tonumber(v.w), tonumber(v.c) or 0
  -- The window that now falls in and what was counted in it; a now
  -- before the counted window is treated as being in it.
  local win, stop = span(p, now)
  local count = 0
  if sc > 0 and win < sw then
    win, stop = sw, spanend(p, sw)
  end
  if sc > 0 and win == sw then
    count = sc
  end
  local e = stop - now
  if count + p.cost <= p.limit then
    local u = 0
    if count > 0 then
      u = e
    end
    return { ok = true, remaining = p.limit - count - p.cost, reset = e, retry = 0, uncounted = u, win = win, stop = stop, count = count }
  end
  return { ok = false, remaining = 0, reset = e, retry = e, win = win, stop = stop, count = count }
end

-- over returns what the window that now falls in counted past the limit
-- (limit.Result's Over), from the fields v as decide gets them.
function M.over(key, p, now, v)
  local r = M.decide(key, p, now, v)
  return max(r.count - p.limit, 0)
end

function M.commit(key, p, now, r, set)
  put(set, 'w', r.win)
  put(set, 'c', r.count + p.cost)
  return r.stop
end

-- left returns the time from now until the window that decide counts in
-- ends: a lease's tokens are good until then.
function M.left(p, now, r)
  return r.stop - now
end

-- bucket returns the window that decide's r counts in: its number, or
-- its start for a calendar unit.
function M.bucket(p, r)
  return r.win
end

return M
