// Command gateway is a rate-limiting reverse proxy. See README.md.
//
// This package is the command line only: one cobra constructor per command
// (serve, validate, match, replay, rules, rls, top, health, version) turns
// flags into a config and calls internal/, and exit codes are chosen in one
// place (Execute). It owns the signals. Invoked as "ratelimit" (a copy or
// a symlink, as envoyproxy/ratelimit's image has /bin/ratelimit), it runs
// `gateway rls --from-env`. It must not hold request-path,
// rule or store logic of its own: what a command does is in internal/.
package main

import (
	"os"

	// The IANA time zones of calendar units, for hosts (and the static
	// container image) without a zoneinfo database.
	_ "time/tzdata"
)

func main() {
	os.Exit(Execute(commandLine(os.Args)))
}
