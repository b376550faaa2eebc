// Command gateway is a rate-limiting reverse proxy. See README.md.
package main

import (
	"os"

	// The IANA time zones of calendar units, for hosts (and the static
	// container image) without a zoneinfo database.
	_ "time/tzdata"
)

func main() {
	os.Exit(Execute(os.Args[1:]))
}
