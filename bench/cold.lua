-- bench/cold.lua: wrk requests of app "mix" (or of the app in $COLD_APP),
-- each with an X-User-Id drawn at random from 100,000 values, so that most
-- requests find a cold key (see bench/rules.yaml and bench/run.sh).
math.randomseed(os.time())
local app = os.getenv("COLD_APP") or "mix"

request = function()
	return wrk.format("GET", "/v1/user/42", {
		["Host"] = wrk.host .. ":" .. wrk.port,
		["X-App-Id"] = app,
		["X-User-Id"] = tostring(math.random(1, 100000)),
	})
end
