-- bench/cold.lua: wrk requests of app "mix", each with an X-User-Id drawn
-- at random from 100,000 values, so that most requests find a cold key
-- (see bench/rules.yaml and bench/run.sh).
math.randomseed(os.time())

request = function()
	return wrk.format("GET", "/v1/user/42", {
		["Host"] = wrk.host .. ":" .. wrk.port,
		["X-App-Id"] = "mix",
		["X-User-Id"] = tostring(math.random(1, 100000)),
	})
end
