// Command gateway is a rate-limiting reverse proxy. See README.md.
package main

import "os"

func main() {
	os.Exit(Execute(os.Args[1:]))
}
